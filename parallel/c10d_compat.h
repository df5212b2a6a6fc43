// The one place that builds c10d objects: the TCPStore, prefix stores and the Gloo
// group (a c10d::Backend in LibTorch 2.x; loom calls its collectives directly, not
// through a ProcessGroup). The Gloo headers come from Debian's libgloo-dev: the
// wheel ships none, and loom touches no Gloo type beyond a shared_ptr to a device.
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#ifndef LOOM_WITHOUT_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace loom::parallel::c10d_compat {

using Store = c10d::Store;
using StorePtr = c10::intrusive_ptr<c10d::Store>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
#ifndef LOOM_WITHOUT_GLOO
using GlooGroup = c10d::ProcessGroupGloo;
using GlooDevice = std::shared_ptr<::gloo::transport::Device>;

inline c10::intrusive_ptr<GlooGroup> make_gloo_group(const StorePtr& store, int rank, int size,
                                                     const GlooDevice& device, std::chrono::milliseconds timeout) {
  auto options = GlooGroup::Options::create(timeout);
  options->devices.push_back(device);
  // Gloo's work threads mostly wait on sockets; one per group keeps ranks from
  // oversubscribing small machines.
  options->threads = 1;
  return c10::make_intrusive<GlooGroup>(store, rank, size, options);
}
#endif  // LOOM_WITHOUT_GLOO

inline StorePtr make_tcp_store(const std::string& host, uint16_t port, bool is_server, int world,
                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = is_server;
  options.numWorkers = world;
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

inline uint16_t tcp_store_port(const StorePtr& store) {
  return static_cast<c10d::TCPStore*>(store.get())->getPort();
}

inline StorePtr prefix_store(const std::string& prefix, const StorePtr& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

}  // namespace loom::parallel::c10d_compat
