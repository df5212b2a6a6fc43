#include "parallel/pipeline_executor.h"

#include <chrono>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

namespace loom::parallel {
namespace {

using Clock = std::chrono::steady_clock;
using Key = std::pair<int64_t, int64_t>;  // (micro-batch, chunk)

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(PipelineSchedule schedule, int64_t micro_batches, int64_t chunks, Communicator& pp,
                                   std::vector<int64_t> activation_shape, torch::ScalarType activation_dtype,
                                   torch::Device device)
    : pp_(pp),
      stages_(pp.size()),
      stage_(pp.rank()),
      chunks_(chunks),
      activation_shape_(std::move(activation_shape)),
      activation_dtype_(activation_dtype),
      device_(device),
      split_backward_(splits_backward(schedule)),
      actions_(pipeline_actions(schedule, pp.rank(), pp.size(), micro_batches, chunks)) {}

int PipelineExecutor::tag(const PipelineTransfer& t) const {
  return static_cast<int>((t.micro * stages_ * chunks_ + t.into) * 2 + (t.gradient ? 1 : 0));
}

PipelineStepTiming PipelineExecutor::run(const ChunkForward& forward) {
  const auto start = Clock::now();
  struct InFlight {
    torch::Tensor input, output;
    Message sent;  // the activations sent on, kept until the backward
  };
  std::map<Key, InFlight> in_flight;
  std::map<std::tuple<int, int64_t, int64_t>, Message> receives;  // (kind, micro, chunk) of the receiving action
  std::vector<Message> gradient_sends;

  auto transfer = [&](const PipelineAction& a,
                      PipelineTransfer::Direction direction) -> std::optional<PipelineTransfer> {
    for (const auto& t : pipeline_transfers(a, stage_, stages_, chunks_)) {
      if (t.direction == direction) return t;
    }
    return std::nullopt;
  };
  auto post = [&](const PipelineAction& a) {
    const auto t = transfer(a, PipelineTransfer::recv);
    if (!t || receives.count({a.kind, a.micro, a.chunk})) return;
    Message message{torch::empty(activation_shape_, torch::TensorOptions().dtype(activation_dtype_).device(device_)),
                    {}};
    message.handle = pp_.send_recv({{P2POp::recv, message.tensor, static_cast<int>(t->peer), tag(*t)}});
    receives.emplace(std::make_tuple(static_cast<int>(a.kind), a.micro, a.chunk), std::move(message));
  };
  auto take = [&](const PipelineAction& a) {
    auto it = receives.find({a.kind, a.micro, a.chunk});
    TORCH_CHECK(it != receives.end(), "pipeline: ", a, " has nothing to receive");
    Message message = std::move(it->second);
    receives.erase(it);
    message.handle.wait();
    return message.tensor;
  };
  auto send = [&](const PipelineAction& a, const torch::Tensor& tensor) {
    const auto t = transfer(a, PipelineTransfer::send);
    Message message{tensor.contiguous(), {}};
    if (t) message.handle = pp_.send_recv({{P2POp::send, message.tensor, static_cast<int>(t->peer), tag(*t)}});
    return message;
  };

  PipelineStepTiming timing;
  for (size_t i = 0; i < actions_.size(); ++i) {
    const PipelineAction& a = actions_[i];
    post(a);
    if (i + 1 < actions_.size()) post(actions_[i + 1]);
    const bool receives_input = transfer(a, PipelineTransfer::recv).has_value();
    const bool sends_output = transfer(a, PipelineTransfer::send).has_value();
    // Under a split backward the linear layers' forwards (and the forwards that recomputation
    // re-runs inside B) leave their weight gradients to this micro-batch's W pass.
    std::optional<DeferWeightGradients> deferring;
    if (split_backward_) deferring.emplace(weight_grads_, WeightGradStore::Key{a.micro, a.chunk});
    if (a.kind == PipelineAction::backward_weight) {
      const auto compute_start = Clock::now();
      timing.deferred_weight_grads += weight_grads_.run({a.micro, a.chunk});
      timing.busy_s += seconds_since(compute_start);
    } else if (a.kind == PipelineAction::forward) {
      InFlight record;
      if (receives_input) record.input = take(a).requires_grad_(true);
      const auto compute_start = Clock::now();
      record.output = forward(a.chunk, a.micro, record.input);
      timing.busy_s += seconds_since(compute_start);
      if (sends_output) record.sent = send(a, record.output.detach());
      in_flight.emplace(Key{a.micro, a.chunk}, std::move(record));
    } else {
      auto it = in_flight.find({a.micro, a.chunk});
      TORCH_CHECK(it != in_flight.end(), "pipeline schedule runs ", a, " before its forward");
      InFlight record = std::move(it->second);
      in_flight.erase(it);
      // The last virtual stage's output is the loss; the others get their output's gradient.
      torch::Tensor gradient = receives_input ? take(a) : torch::Tensor();
      const auto compute_start = Clock::now();
      record.output.backward(gradient);
      timing.busy_s += seconds_since(compute_start);
      if (sends_output) gradient_sends.push_back(send(a, record.input.grad()));
      record.sent.handle.wait();  // long received: its backward came back
    }
  }
  for (auto& message : gradient_sends) message.handle.wait();
  TORCH_CHECK(in_flight.empty() && receives.empty() && weight_grads_.empty(),
              "pipeline step ended with micro-batches in flight");
  timing.wall_s = seconds_since(start);
  return timing;
}

void PipelineExecutor::run_forward(const ChunkForward& forward) {
  std::vector<PipelineAction> forwards;
  for (const auto& a : actions_) {
    if (a.kind == PipelineAction::forward) forwards.push_back(a);
  }
  auto transfer = [&](const PipelineAction& a,
                      PipelineTransfer::Direction direction) -> std::optional<PipelineTransfer> {
    for (const auto& t : pipeline_transfers(a, stage_, stages_, chunks_)) {
      if (t.direction == direction) return t;
    }
    return std::nullopt;
  };
  std::map<Key, Message> receives;
  std::vector<Message> sends;
  auto post = [&](const PipelineAction& a) {
    const auto t = transfer(a, PipelineTransfer::recv);
    if (!t || receives.count({a.micro, a.chunk})) return;
    Message message{torch::empty(activation_shape_, torch::TensorOptions().dtype(activation_dtype_).device(device_)),
                    {}};
    message.handle = pp_.send_recv({{P2POp::recv, message.tensor, static_cast<int>(t->peer), tag(*t)}});
    receives.emplace(Key{a.micro, a.chunk}, std::move(message));
  };
  for (size_t i = 0; i < forwards.size(); ++i) {
    const PipelineAction& a = forwards[i];
    post(a);
    if (i + 1 < forwards.size()) post(forwards[i + 1]);
    torch::Tensor input;
    if (auto it = receives.find({a.micro, a.chunk}); it != receives.end()) {
      it->second.handle.wait();
      input = it->second.tensor;
      receives.erase(it);
    }
    const torch::Tensor output = forward(a.chunk, a.micro, input);
    if (const auto t = transfer(a, PipelineTransfer::send)) {
      Message message{output.contiguous(), {}};
      message.handle = pp_.send_recv({{P2POp::send, message.tensor, static_cast<int>(t->peer), tag(*t)}});
      sends.push_back(std::move(message));
    }
  }
  for (auto& message : sends) message.handle.wait();
  TORCH_CHECK(receives.empty(), "pipeline evaluation ended with activations not received");
}

}  // namespace loom::parallel
