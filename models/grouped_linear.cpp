#include "models/grouped_linear.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <numeric>
#include <optional>

#include "parallel/flat_layout.h"

namespace loom::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A [T, k] x B [G, k, n] -> [T, n] with the rows of A split at OFFS (int32 ends of each group),
// or, with A [m, T] and B [T, n] -> [G, m, n], the sum over the rows split at OFFS. ATen's
// _grouped_mm does both in one call on the CPU (fp32, bf16, fp16) and on GPUs in bf16 (CUTLASS's
// grouped GEMM on Hopper and later); elsewhere (fp32 on a GPU, fp64, and operands whose strides
// are not multiples of 16 bytes, which _grouped_mm refuses even on the CPU: an expert 6 wide, as
// 24 split over expert_tp 4 is) each group is one mm into its slice of the output. A GPU whose
// LibTorch refuses the bf16 call (an older architecture) takes the loop too, with one warning.
bool strides_aligned(const torch::Tensor& t) {
  const auto bytes = static_cast<int64_t>(t.element_size());
  if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) != 1 && t.size(d) > 1 && t.stride(d) * bytes % 16 != 0) return false;
  return true;
}

// Whether _grouped_mm takes these operands here (else: one mm per group, with the rows on the host).
bool grouped_gemm_takes(const torch::Tensor& a, const torch::Tensor& b) {
  const bool aligned = strides_aligned(a) && strides_aligned(b);
  if (a.device().is_cpu()) return a.scalar_type() != torch::kFloat64 && aligned;
  return a.is_cuda() && a.scalar_type() == torch::kBFloat16 && aligned;
}

// Whether this process's LibTorch refused the GPU's grouped GEMM once: it is not asked again
// (a refusal throws, and every product of every layer would pay for it).
std::atomic<bool>& gpu_refused() {
  static std::atomic<bool> refused{false};
  return refused;
}

torch::Tensor grouped_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& offs,
                         const parallel::GroupRows& groups) {
  if (grouped_gemm_takes(a, b)) {
    if (a.device().is_cpu()) return at::_grouped_mm(a, b, offs);
    if (!gpu_refused().load()) {
      try {
        return at::_grouped_mm(a, b, offs);
      } catch (const c10::OutOfMemoryError&) {
        throw;  // not a refusal: the caller's to report
      } catch (const c10::Error& e) {
        gpu_refused().store(true);
        TORCH_WARN("loom: ATen's grouped GEMM refused this GPU (", e.what_without_backtrace(),
                   "); the experts' products run one by one");
      }
    }
  }
  const auto& rows = groups.host();
  const bool rows_of_a = b.dim() == 3;
  auto out = rows_of_a ? torch::empty({a.size(0), b.size(2)}, a.options())
                       : torch::empty({static_cast<int64_t>(rows.size()), a.size(0), b.size(1)}, a.options());
  int64_t start = 0;
  for (size_t g = 0; g < rows.size(); start += rows[g], ++g) {
    auto slice = rows_of_a ? out.narrow(0, start, rows[g]) : out[g];
    if (rows_of_a)
      at::mm_out(slice, a.narrow(0, start, rows[g]), b[g]);
    else
      at::mm_out(slice, a.narrow(1, start, rows[g]), b.narrow(0, start, rows[g]));
  }
  return out;
}

// The rows as backward sees them: on the host if forward read them there, else their offsets.
parallel::GroupRows rows_from(const torch::Tensor& offs, int64_t total, const c10::IValue& host) {
  if (host.isIntList()) return parallel::GroupRows(host.toIntVector());
  auto ends = offs.to(torch::kInt64);
  return parallel::GroupRows(
      ends - torch::cat({torch::zeros({1}, ends.options()), ends.narrow(0, 0, ends.size(0) - 1)}), total);
}

// The distance, in elements, from each group's weights to the next's where GROUP_MAJOR (each
// group's KINDS weights, then the next group's) lie in one storage with each group's kinds back to
// back and the groups one fixed distance apart, at least their own length: then the stack of them
// is a view. So they lie after pack_into_one_storage (the distance is their own length), and in
// AdamW's flat buffer (optim/adamw.h), where an expert's gate, up and proj lie one after another
// and each kind's weights are one expert's parameters apart. Else nullopt.
std::optional<int64_t> group_distance(at::TensorList group_major, int64_t kinds) {
  const auto& first = group_major.front();
  if (!first.is_contiguous() || first.dim() != 2) return std::nullopt;
  const int64_t numel = first.numel(), groups = static_cast<int64_t>(group_major.size()) / kinds;
  const int64_t distance =
      groups > 1 ? group_major[static_cast<size_t>(kinds)].storage_offset() - first.storage_offset() : kinds * numel;
  if (distance < kinds * numel) return std::nullopt;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < kinds; ++k) {
      const auto& w = group_major[static_cast<size_t>(g * kinds + k)];
      if (w.sizes() != first.sizes() || w.scalar_type() != first.scalar_type() || !w.is_contiguous() ||
          !w.storage().is_alias_of(first.storage()) ||
          w.storage_offset() != first.storage_offset() + g * distance + k * numel)
        return std::nullopt;
    }
  return distance;
}

// The weights of KINDS kinds, kind-major (the G groups' of the first kind, then the second's), as
// one tensor [G, KINDS x out, in]: each group's weights of every kind one above another. A view
// where they lie so in one storage (group_distance), else a copy.
torch::Tensor stacked_kinds(at::TensorList weights, int64_t kinds) {
  const auto groups = static_cast<int64_t>(weights.size()) / kinds;
  std::vector<torch::Tensor> group_major;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t k = 0; k < kinds; ++k) group_major.push_back(weights[static_cast<size_t>(k * groups + g)]);
  const auto& first = group_major.front();
  if (const auto distance = group_distance(group_major, kinds))
    return first.as_strided({groups, kinds * first.size(0), first.size(1)}, {*distance, first.size(1), 1});
  return torch::stack(group_major).view({groups, kinds * first.size(0), first.size(1)});
}

// Whether WEIGHTS lie one after another in one storage, as a stack of them would.
bool one_after_another(at::TensorList weights) {
  const auto distance = group_distance(weights, 1);
  return distance && *distance == weights.front().numel();
}

// The experts' weights come in one by one and are stacked inside (no autograd node of their own):
// what backward keeps is the parameters themselves, not a stacked copy per micro-batch in flight.
struct GroupedLinear : torch::autograd::Function<GroupedLinear> {
  // WEIGHTS as a TensorList: autograd's argument extraction takes each tensor of an ArrayRef as an
  // input of its own (a std::vector would count as one non-tensor argument). KINDS kinds of G each.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList weights, int64_t kinds,
                               const parallel::GroupRows& rows) {
    auto offs = rows.offsets(x.device());
    variable_list saved{x, offs};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["total"] = rows.total();
    ctx->saved_data["kinds"] = kinds;
    auto y = grouped_mm(x, stacked_kinds(weights, kinds).transpose(1, 2), offs, rows);
    // Read for a product group by group: backward needs it too, and need not read it again.
    if (rows.on_host()) ctx->saved_data["rows"] = torch::IntArrayRef(rows.host());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &offs = saved[1];
    const variable_list weights(saved.begin() + 2, saved.end());
    const auto kinds = ctx->saved_data["kinds"].toInt();
    const auto rows = rows_from(offs, ctx->saved_data["total"].toInt(), ctx->saved_data["rows"]);
    const auto grad = grads[0].contiguous();
    variable_list out{torch::Tensor()};
    if (ctx->needs_input_grad(0)) out[0] = grouped_mm(grad, stacked_kinds(weights, kinds), offs, rows);
    // Each expert's gradient is its rows' grad^T x: an expert with no rows gets zeros.
    bool any_weight = false;
    for (size_t g = 0; g < weights.size(); ++g) any_weight = any_weight || ctx->needs_input_grad(1 + g);
    if (any_weight) {
      // [G, KINDS x out, in]: kind k's gradients are the rows k x out onwards of each group's.
      const auto grad_w = grouped_mm(grad.t(), x, offs, rows);
      const int64_t width = grad_w.size(1) / kinds;
      for (int64_t k = 0; k < kinds; ++k) {
        auto of_kind = grad_w.narrow(1, k * width, width).unbind(0);
        out.insert(out.end(), of_kind.begin(), of_kind.end());
      }
    } else {
      out.resize(1 + weights.size());
    }
    out.emplace_back();  // kinds
    out.emplace_back();  // rows
    return out;
  }
};

}  // namespace

torch::Tensor stacked_weights(at::TensorList weights) {
  return stacked_kinds(weights, 1);
}

void pack_into_one_storage(const std::vector<torch::Tensor>& weights) {
  // Only weights that own their whole storage: one that is a view into another buffer (a ZeRO-2/3
  // unit's, which its gathers write into) must stay where that buffer's owner looks for it.
  if (weights.size() < 2 || one_after_another(weights) || !parallel::each_owns_its_storage(weights)) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> values;
  for (const auto& w : weights) values.push_back(w.detach());
  const auto packed = torch::stack(values);
  // set_data keeps each parameter object (its name, its hooks, the optimizer's and the master
  // weights' references) and gives it a view of the packed storage.
  for (size_t g = 0; g < weights.size(); ++g) weights[g].set_data(packed[static_cast<int64_t>(g)]);
}

torch::Tensor add_grouped_biases(torch::Tensor y, const torch::Tensor& biases, const parallel::GroupRows& rows) {
  if (!biases.defined()) return y;
  return y + biases.index_select(0, rows.group_of_row(y.device()));
}

torch::Tensor grouped_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                             const torch::Tensor& biases, const parallel::GroupRows& rows) {
  return add_grouped_biases(grouped_linear_kinds(x, {weights}, rows), biases, rows);
}

torch::Tensor grouped_linear_kinds(const torch::Tensor& x, const std::vector<std::vector<torch::Tensor>>& kinds,
                                   const parallel::GroupRows& rows) {
  const auto groups = static_cast<size_t>(rows.groups());
  std::vector<torch::Tensor> all;
  for (const auto& weights : kinds) {
    TORCH_CHECK(x.dim() == 2 && weights.size() == groups && !weights.empty() && weights[0].dim() == 2 &&
                    weights[0].sizes() == kinds.front().front().sizes() && weights[0].size(1) == x.size(1),
                "grouped_linear: x ", x.sizes(), ", ", weights.size(), " weights of ",
                weights.empty() ? torch::IntArrayRef{} : weights[0].sizes(), ", ", groups, " groups");
    all.insert(all.end(), weights.begin(), weights.end());
  }
  TORCH_CHECK(rows.total() == x.size(0), "grouped_linear: the ", groups, " groups' rows do not add up to x's ",
              x.size(0));
  // _grouped_mm wants contiguous rows. No rows at all need no product: an empty one still gives
  // x and every weight a (zero) gradient.
  if (x.size(0) == 0) {
    std::vector<torch::Tensor> sums;
    for (const auto& weights : kinds) sums.push_back(torch::stack(weights).sum(0));
    return torch::matmul(x, torch::cat(sums, 0).t());
  }
  return GroupedLinear::apply(x.contiguous(), at::TensorList(all), static_cast<int64_t>(kinds.size()), rows);
}

torch::Tensor grouped_linear_loop(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                  const torch::Tensor& biases, const std::vector<int64_t>& rows) {
  auto blocks = x.split_with_sizes(rows, 0);
  std::vector<torch::Tensor> out;
  for (size_t g = 0; g < rows.size(); ++g)
    out.push_back(torch::linear(blocks[g], weights[g], biases.defined() ? biases[g] : torch::Tensor()));
  return torch::cat(out, 0);
}

}  // namespace loom::models
