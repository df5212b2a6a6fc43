#include "parallel/collective_presence.h"

#include <exception>

namespace loom::parallel {
namespace {

// How deep the calling thread is in collectives: a composite's steps run inside its own call.
thread_local int t_depth = 0;

}  // namespace

InsideCollective::InsideCollective(CollectivePresence* presence)
    : presence_(t_depth++ == 0 ? presence : nullptr), uncaught_(std::uncaught_exceptions()) {
  if (presence_) presence_->inside.fetch_add(1);
}

InsideCollective::~InsideCollective() {
  --t_depth;
  if (!presence_ || std::uncaught_exceptions() > uncaught_) return;
  presence_->exits.fetch_add(1);  // first, so that a reading taken between the two still moved
  presence_->inside.fetch_sub(1);
}

}  // namespace loom::parallel
