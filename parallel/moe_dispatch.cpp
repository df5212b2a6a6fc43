#include "parallel/moe_dispatch.h"

#include <numeric>

#include "parallel/weighted_combine.h"

namespace loom::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// The rows that leave (or arrive at) this rank, its own rows excluded, in bytes.
int64_t foreign_bytes(const std::vector<int64_t>& splits, int rank, int64_t row_bytes) {
  return (sum(splits) - splits[static_cast<size_t>(rank)]) * row_bytes;
}

torch::Tensor exchange(const torch::Tensor& x, const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits, Communicator& comm, AllToAllVolume* volume) {
  auto input = x.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = sum(output_splits);
  auto output = torch::empty(shape, input.options());
  comm.all_to_all(output, input, output_splits, input_splits).wait();
  if (volume) {
    // From the shape, not numel / rows: a rank may send no rows and still receive some.
    int64_t row_bytes = input.element_size();
    for (int64_t d = 1; d < input.dim(); ++d) row_bytes *= input.size(d);
    volume->sent += foreign_bytes(input_splits, comm.rank(), row_bytes);
    volume->received += foreign_bytes(output_splits, comm.rank(), row_bytes);
  }
  return output;
}

// The communicator and the volume travel through the context as addresses: it
// stores IValues only, and both outlive every graph built on them.
struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::vector<int64_t> output_splits,
                               std::vector<int64_t> input_splits, int64_t comm, int64_t volume) {
    ctx->saved_data["output_splits"] = output_splits;
    ctx->saved_data["input_splits"] = input_splits;
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["volume"] = volume;
    return exchange(x, output_splits, input_splits, *reinterpret_cast<Communicator*>(comm),
                    reinterpret_cast<AllToAllVolume*>(volume));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto grad = exchange(grads[0], ctx->saved_data["input_splits"].toIntVector(),
                         ctx->saved_data["output_splits"].toIntVector(),
                         *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt()),
                         reinterpret_cast<AllToAllVolume*>(ctx->saved_data["volume"].toInt()));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Rows of X [N, H] in the order of PERM (a permutation of N); backward gathers by INVERSE,
// where index_select's own backward scatter-adds (atomics on a GPU) for what is a permutation.
struct PermuteRows : torch::autograd::Function<PermuteRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& perm,
                               const torch::Tensor& inverse) {
    ctx->save_for_backward({inverse});
    return x.index_select(0, perm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0].index_select(0, ctx->get_saved_variables()[0]), torch::Tensor(), torch::Tensor()};
  }
};

// Token TOKEN_OF_ROW[i] of X [T, H] for every row i, where each token appears exactly K times
// (every choice kept): backward brings each row's gradient back to its choice (by ROW_OF_CHOICE)
// and sums each token's K, in choice order, rounding once.
struct GatherTokens : torch::autograd::Function<GatherTokens> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& token_of_row,
                               const torch::Tensor& row_of_choice, int64_t k) {
    ctx->save_for_backward({row_of_choice});
    ctx->saved_data["k"] = k;
    ctx->saved_data["tokens"] = x.size(0);  // not from the rows: none at all leave -1 undecided
    return x.index_select(0, token_of_row);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto k = ctx->saved_data["k"].toInt(), tokens = ctx->saved_data["tokens"].toInt();
    const auto& grad = grads[0];
    auto per_choice = grad.index_select(0, ctx->get_saved_variables()[0]);
    return {per_choice.view({tokens, k, grad.size(1)}).sum(1), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor count_per_expert(const torch::Tensor& experts, int64_t num_experts) {
  const auto flat = experts.reshape({-1});
  return torch::zeros({num_experts}, flat.options().dtype(torch::kInt64))
      .scatter_add_(0, flat, torch::ones_like(flat, torch::kInt64));
}

torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& output_splits,
                              const std::vector<int64_t>& input_splits, Communicator& comm, AllToAllVolume* volume) {
  if (comm.size() == 1) return x;
  return AllToAllRows::apply(x, output_splits, input_splits, static_cast<int64_t>(reinterpret_cast<intptr_t>(&comm)),
                             static_cast<int64_t>(reinterpret_cast<intptr_t>(volume)));
}

TokenDispatcher::TokenDispatcher(int64_t num_experts, Communicator& ep, AllToAllVolume* volume)
    : num_experts_(num_experts), num_local_(num_experts / ep.size()), ep_(ep), volume_(volume) {
  TORCH_CHECK(num_experts > 0 && num_experts % ep.size() == 0, "TokenDispatcher: ", num_experts,
              " experts do not spread evenly over an ep group of ", ep.size());
}

TokenDispatcher::Dispatched TokenDispatcher::dispatch(const torch::Tensor& x, const ExpertAssignment& a) {
  const int64_t tokens = x.size(0), k = a.experts.size(1), ranks = ep_.size();
  TORCH_CHECK(
      a.experts.size(0) == tokens && a.weights.sizes() == a.experts.sizes() && a.keep.sizes() == a.experts.sizes(),
      "TokenDispatcher: the assignment must be [tokens, k] for ", tokens, " tokens");
  Dispatched out;
  Plan& plan = out.plan;
  plan.num_tokens = tokens;
  if (ranks == 1 && a.all_kept) return dispatch_all_kept(x, a);
  // Choices are numbered token-major (choice c of token t is t k + c); the kept
  // ones sorted by (expert, number) give each expert's rows in token order.
  auto kept = a.keep.reshape({-1}).nonzero().reshape({-1});
  auto kept_experts = a.experts.reshape({-1}).index_select(0, kept);
  auto order = std::get<1>((kept_experts * (tokens * k) + kept).sort());
  auto choice = kept.index_select(0, order);
  plan.token_of_row = choice.div(k, "floor");
  plan.weight_of_row = a.weights.reshape({-1}).index_select(0, choice);
  auto rows = x.index_select(0, plan.token_of_row);

  // How many rows go to each expert; each rank learns how many it receives for its experts.
  auto counts = count_per_expert(kept_experts, num_experts_);
  auto received_counts = counts;
  std::vector<int64_t> per_rank(static_cast<size_t>(ranks), num_local_);
  if (ranks > 1) received_counts = exchange(counts, per_rank, per_rank, ep_, volume_);
  auto sent = counts.view({ranks, num_local_}),
       got = received_counts.view({ranks, num_local_});  // [rank, local expert]
  // Both tables read on the host in one copy (on a GPU, one transfer rather than one per value).
  const auto on_host = torch::cat({sent, got}).to(torch::kCPU);
  const auto got_flat = on_host.narrow(0, ranks, ranks).contiguous();
  const auto sent_per_rank = on_host.narrow(0, 0, ranks).sum(1), got_per_rank = got_flat.sum(1);
  for (int64_t r = 0; r < ranks; ++r) {
    plan.input_splits.push_back(sent_per_rank[r].item<int64_t>());
    plan.output_splits.push_back(got_per_rank[r].item<int64_t>());
  }
  auto received = all_to_all_rows(rows, plan.output_splits, plan.input_splits, ep_, volume_);

  // Received rows come rank by rank, each rank's sorted by local expert; each
  // local expert wants its rows from every rank together.
  const int64_t* g = got_flat.data_ptr<int64_t>();
  std::vector<int64_t> start(static_cast<size_t>(ranks * num_local_));
  int64_t offset = 0;
  for (int64_t i = 0; i < ranks * num_local_; ++i) {
    start[static_cast<size_t>(i)] = offset;
    offset += g[i];
  }
  std::vector<int64_t> regroup, rows_per_expert;
  regroup.reserve(static_cast<size_t>(offset));
  for (int64_t e = 0; e < num_local_; ++e) {
    int64_t rows_of_expert = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t i = r * num_local_ + e;
      for (int64_t j = 0; j < g[i]; ++j) regroup.push_back(start[static_cast<size_t>(i)] + j);
      rows_of_expert += g[i];
    }
    rows_per_expert.push_back(rows_of_expert);
  }
  out.tokens_per_expert = GroupRows(rows_per_expert);
  plan.regroup = torch::tensor(regroup, torch::kInt64).to(x.device());
  plan.ungroup = torch::empty_like(plan.regroup);
  if (offset > 0) plan.ungroup.index_copy_(0, plan.regroup, torch::arange(offset, plan.regroup.options()));
  out.tokens = ranks > 1 ? received.index_select(0, plan.regroup) : received;  // one rank: already grouped
  return out;
}

TokenDispatcher::Dispatched TokenDispatcher::dispatch_all_kept(const torch::Tensor& x, const ExpertAssignment& a) {
  // Every choice is a row, nothing is read back to the host: the rows are the choices sorted by
  // expert (stably, so each expert's rows in token order, as above), and the counts stay on the device.
  const int64_t tokens = x.size(0), k = a.experts.size(1), choices = tokens * k;
  Dispatched out;
  Plan& plan = out.plan;
  plan.num_tokens = tokens;
  const auto experts = a.experts.reshape({-1});
  plan.choice_of_row = std::get<1>(experts.sort(/*stable=*/true, 0, false));
  plan.row_of_choice = torch::empty_like(plan.choice_of_row)
                           .scatter_(0, plan.choice_of_row, torch::arange(choices, plan.choice_of_row.options()));
  plan.token_of_row = plan.choice_of_row.div(k, "floor");
  plan.weights = a.weights;
  out.tokens = GatherTokens::apply(x, plan.token_of_row, plan.row_of_choice, k);
  out.tokens_per_expert = GroupRows(count_per_expert(experts, num_experts_), choices);
  return out;
}

torch::Tensor TokenDispatcher::combine(const torch::Tensor& expert_output, const Plan& plan) {
  if (plan.row_of_choice.defined()) {
    // [T, k, H'] times the weights [T, k, 1], summed over k: elementwise, since a batched product
    // of T 1 x k x H' matrices runs on a GPU as T tiny GEMMs (41 ms a step for the MoE benchmark's
    // backward on an H200, the largest kernel of its profile).
    const auto weights = plan.weights.to(expert_output.scalar_type());
    // On a GPU, loom's kernel: the same sums, one pass each way (parallel/weighted_combine.h).
    if (weighted_combine_takes(expert_output, weights))
      return weighted_combine(expert_output, plan.row_of_choice, weights);
    const int64_t k = plan.weights.size(1);
    auto by_choice = PermuteRows::apply(expert_output, plan.row_of_choice, plan.choice_of_row);
    return (by_choice.view({plan.num_tokens, k, expert_output.size(1)}) * weights.unsqueeze(2)).sum(1);
  }
  auto by_rank = ep_.size() > 1 ? expert_output.index_select(0, plan.ungroup) : expert_output;
  auto returned = all_to_all_rows(by_rank, plan.input_splits, plan.output_splits, ep_, volume_);
  auto weighted = returned * plan.weight_of_row.unsqueeze(1).to(returned.scalar_type());
  return torch::zeros({plan.num_tokens, expert_output.size(1)}, expert_output.options())
      .index_add(0, plan.token_of_row, weighted);
}

}  // namespace loom::parallel
