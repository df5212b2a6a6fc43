#include "parallel/alpha_beta_probe.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "parallel/hierarchical_communicator.h"
#include "parallel/line_fit.h"
#include "parallel/ring_all_reduce_scope.h"

namespace loom::parallel {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds of one all-reduce of BUFFER over COMM, issue to completion (on a GPU, to the device's
// completion: the result read back is the wait).
double time_all_reduce(Communicator& comm, torch::Tensor& buffer) {
  const auto start = std::chrono::steady_clock::now();
  comm.all_reduce(buffer).wait();
  if (buffer.is_cuda()) (void)buffer[0].item<float>();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every rank measured its own groups of each kind; gathered over WORLD, each row (a kind) gets
// "groups": every group of that kind with its members and fit (from its first rank's
// measurement), so that a slow link outside this rank's groups shows too, and "slowest": the
// group whose largest all-reduce took longest. Collective: every rank sends a slot per kind of
// kAllGroupKinds (SLOT[i]: row I's), absent where it has no such group (the embedding group's
// middle pipeline stages), so that every rank sends the same bytes.
void add_every_group(Communicator& world, nlohmann::json& rows, const std::vector<int64_t>& first_member,
                     const std::vector<size_t>& slot) {
  constexpr int64_t kFields = 5;  // first member (-1: absent), fitted, alpha_us, bandwidth_GBps, largest median
  const auto kinds = static_cast<int64_t>(kAllGroupKinds.size());
  auto mine = torch::full({kinds * kFields}, -1.0, torch::kFloat64);
  auto m = mine.accessor<double, 1>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const auto at = static_cast<int64_t>(slot[i]) * kFields;
    m[at] = static_cast<double>(first_member[i]);
    m[at + 1] = row.contains("alpha_us") ? 1 : 0;
    m[at + 2] = row.value("alpha_us", 0.0);
    m[at + 3] = row.value("bandwidth_GBps", 0.0);
    m[at + 4] = row.contains("points") ? row.at("points").back().at(1).get<double>() : 0.0;
  }
  const int64_t world_size = world.size();
  auto all = torch::zeros({world_size, kinds * kFields}, torch::kFloat64);
  if (world_size > 1) {
    world.all_gather(all, mine).wait();
  } else {
    all[0].copy_(mine);
  }
  auto a = all.accessor<double, 2>();
  for (size_t row_index = 0; row_index < rows.size(); ++row_index) {
    const auto i = static_cast<int64_t>(slot[row_index]);
    std::map<int64_t, nlohmann::json> by_first;  // the groups of this kind, by their first rank
    for (int64_t r = 0; r < world_size; ++r) {
      const auto first = static_cast<int64_t>(a[r][i * kFields]);
      if (first < 0) continue;  // rank r has no group of this kind
      auto& group = by_first[first];
      group["ranks"].push_back(r);
      if (r != first) continue;
      if (a[r][i * kFields + 1] > 0) {
        group["alpha_us"] = a[r][i * kFields + 2];
        if (a[r][i * kFields + 3] > 0) group["bandwidth_GBps"] = a[r][i * kFields + 3];
      } else {
        group["no_fit"] = rows[row_index].value("no_fit", std::string("no line through its first rank's times"));
      }
      group["largest_s"] = a[r][i * kFields + 4];
    }
    auto& row = rows[row_index];
    row["groups"] = nlohmann::json::array();
    double slowest = -1;
    for (auto& [first, group] : by_first) {
      if (group.value("largest_s", 0.0) > slowest) slowest = group.value("largest_s", 0.0), row["slowest"] = group;
      row["groups"].push_back(group);
    }
  }
}

}  // namespace

nlohmann::json probe_alpha_beta(ProcessGroups& groups, const torch::Device& device,
                                const AlphaBetaProbeOptions& options) {
  TORCH_CHECK(options.sizes_bytes.size() >= 2 && options.repeats >= 1,
              "probe_alpha_beta: a line needs two sizes or more, each measured at least once");
  // The ring at every size, the algorithm the fit below models (over Gloo, small all-reduces take
  // one all-to-all otherwise). HSDP's replica steps run on a thread of their own and keep it.
  RingAllReduceScope ring;
  nlohmann::json out = nlohmann::json::array();
  std::vector<int64_t> first_member;   // per row: the global rank that heads this rank's group
  std::vector<size_t> slot;            // per row: its kind's place in kAllGroupKinds
  std::set<const Communicator*> seen;  // kinds that share a communicator (dp-cp is dp at cp 1) once
  for (GroupKind kind : kAllGroupKinds) {
    if (!groups.has(kind)) continue;
    Communicator& comm = groups.get(kind);
    if (comm.size() < 2 || !seen.insert(&comm).second) continue;
    nlohmann::json row = {{"group", group_kind_name(kind)}, {"ranks", comm.size()}};
    first_member.push_back(comm.ranks().front());
    slot.push_back(
        static_cast<size_t>(std::find(kAllGroupKinds.begin(), kAllGroupKinds.end(), kind) - kAllGroupKinds.begin()));
    // Two levels (parallel.dp_collectives: hierarchical) put different bytes on the node's links
    // and across nodes: not one ring's line. Every rank of the group skips it alike.
    if (dynamic_cast<HierarchicalCommunicator*>(&comm)) {
      row["no_fit"] =
          "a two-level group (parallel.dp_collectives: hierarchical): its node's and the cross-node links differ";
      out.push_back(row);
      continue;
    }
    std::vector<std::pair<double, double>> points;
    const bool bounded = options.max_call_s > 0;
    // The group's slowest of VALUE: every rank of it takes the same decision on the sizes.
    auto slowest_in_group = [&](double value) {
      auto slowest = torch::full({1}, value, torch::TensorOptions().dtype(torch::kFloat64).device(device));
      comm.all_reduce(slowest, ReduceOp::max).wait();
      return slowest.item<double>();
    };
    double slowest_s = 0;  // the group's slowest median at the last size measured
    std::string too_slow;
    for (int64_t bytes : options.sizes_bytes) {
      std::ostringstream why;
      why << std::setprecision(2);
      if (bounded && !points.empty()) {
        // Bytes over the last size's time: pessimistic for a latency-bound link, never optimistic.
        const double predicted = slowest_s * static_cast<double>(bytes) / points.back().first;
        if (predicted > options.max_call_s) {
          why << bytes << " bytes would take up to " << predicted << " s an all-reduce, past the probe's "
              << options.max_call_s << " s";
          too_slow = why.str();
          break;
        }
      }
      auto buffer = torch::ones({bytes / 4}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
      const double first_s = time_all_reduce(comm, buffer);  // (unmeasured where fast: connections and buffers set up)
      const double slowest_first_s = bounded ? slowest_in_group(first_s) : 0.0;
      std::vector<double> seconds;
      if (bounded && slowest_first_s > options.soft_call_s) {
        // Slow already: this call is the size's point, and no larger size is measured.
        seconds.push_back(first_s);
        why << "larger sizes left out: " << bytes << " bytes took " << slowest_first_s << " s an all-reduce";
        too_slow = why.str();
      } else {
        for (int64_t r = 0; r < options.repeats; ++r) seconds.push_back(time_all_reduce(comm, buffer));
      }
      points.emplace_back(static_cast<double>(bytes), median(seconds));
      row["points"].push_back({bytes, points.back().second});
      if (!too_slow.empty()) break;
      if (bounded) slowest_s = slowest_in_group(points.back().second);
    }
    if (points.size() < 2) {
      row["no_fit"] = "a link too slow to measure at two sizes (" + too_slow + ")";
      out.push_back(row);
      continue;
    }
    if (!too_slow.empty()) row["sizes_left_out"] = too_slow;
    // Least squares through the medians.
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto [x, y] : points) {
      n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    const auto line = fit_line(n, sx, sy, sxx, sxy);
    const double slope = line.beta, intercept = line.alpha;
    const double p = static_cast<double>(comm.size());
    const double smallest_s = points.front().second, largest_s = points.back().second;
    if (!line.has_slope) {
      row["no_fit"] = "the sizes measured do not fix a line";
    } else if (slope <= 0 || largest_s < 1.1 * smallest_s) {
      // Latency-bound: the largest all-reduce took hardly longer than the smallest (a delayed or
      // congested link, or transfers small beside each call's cost), so the slope is noise and no
      // bandwidth can be read; each ring step's share of the mean time is the latency.
      row["alpha_us"] = sy / n / (2.0 * (p - 1.0)) * 1e6;
      row["no_bandwidth"] = "latency-bound: the largest all-reduce took under 10% longer than the smallest";
    } else if (intercept < 0) {
      row["no_fit"] = "the line through the times has a negative latency";
    } else {
      row["alpha_us"] = intercept / (2.0 * (p - 1.0)) * 1e6;
      row["bandwidth_GBps"] = 2.0 * (p - 1.0) / p / slope / 1e9;
    }
    out.push_back(row);
  }
  add_every_group(groups.world_comm(), out, first_member, slot);
  return out;
}

}  // namespace loom::parallel
