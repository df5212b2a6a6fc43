#include "launch/verify_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/errors.h"
#include "core/safetensors.h"
#include "launch/step_dump.h"

namespace loom::launch {
namespace {

std::string sci(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1e", x);
  return text;
}

// max |A - B| / max |B| (the absolute difference where B is all zeros).
double relative(const torch::Tensor& a, const torch::Tensor& b, const std::string& name) {
  if (a.sizes() != b.sizes()) {
    std::ostringstream s;
    s << "loom verify: '" << name << "' has shape " << a.sizes() << " in the layout and " << b.sizes()
      << " in the reference";
    throw InputError(s.str());
  }
  if (a.numel() == 0) return 0.0;
  const double diff = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  const double scale = b.abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

// Where a replica lives: its ranks' coordinates (tp -1 when the tensor is joined from every tp rank).
struct Coords {
  int64_t tp = -1, cp = 0, pp = 0, dp = 0, ep = 0, expert_dp = 0;
  std::vector<int64_t> ranks;
};

struct Replica {
  Coords at;
  torch::Tensor gradient, weight;
};

struct Parameter {
  ParameterPlace place;
  std::vector<Replica> replicas;
  double gradient_error = 0.0, weight_error = 0.0;  // the worst replica's
};

struct Dump {
  LayoutSizes sizes;
  std::vector<std::string> order;  // names, in the model's order
  std::map<std::string, Parameter> params;
};

// Every rank's first-step files of the run in DIR, the tp parts of each tensor joined.
Dump read_dump(const std::string& run_dir) {
  const std::string dir = run_dir + "/first_step";
  Dump dump;
  struct Part {
    int64_t tp;
    torch::Tensor gradient, weight;
  };
  struct Group {
    Coords at;
    int64_t dim = -1;
    std::vector<int64_t> shape;
    std::vector<Part> parts;
  };
  std::map<std::string, std::vector<Group>> groups;
  // Exactly the world's files: every rank's, each of this run (rank 0's says how many).
  int64_t world = 1;
  for (int64_t rank = 0; rank < world; ++rank) {
    const std::string described = dir + "/" + rank_description_file(rank);
    if (!std::filesystem::exists(described)) {
      throw InputError("loom verify: " + described +
                       " is missing (the run did not reach step 1, or its ranks do not share this file system)");
    }
    const auto json = nlohmann::json::parse(std::ifstream(described));
    if (rank == 0) world = json.at("world").get<int64_t>();
    if (json.at("world").get<int64_t>() != world)
      throw InputError("loom verify: " + described + " is of another run (world " + json.at("world").dump() + ")");
    const auto& s = json.at("sizes");
    dump.sizes = {s.at("tp"), s.at("cp"), s.at("pp"), s.at("dp"), s.at("ep")};
    const auto& c = json.at("coords");
    const auto grads = read_safetensors(dir + "/" + rank_tensor_file("gradients", rank));
    const auto weights = read_safetensors(dir + "/" + rank_tensor_file("weights", rank));
    for (const auto& p : json.at("params")) {
      const std::string name = p.at("name");
      const int64_t dim = p.at("tp_split_dim");
      Coords at{dim < 0 ? c.at("tp").get<int64_t>() : -1,
                c.at("cp"),
                c.at("pp"),
                c.at("dp"),
                c.at("ep"),
                c.at("expert_dp"),
                {rank}};
      if (!dump.params.count(name)) {
        dump.order.push_back(name);
        auto& place = dump.params[name].place;
        place = {name, dim, p.at("expert"), p.at("summed_over_tp"), at.pp, at.ep};
      }
      auto& list = groups[name];
      auto same = std::find_if(list.begin(), list.end(), [&](const Group& g) {
        return dim >= 0 && g.at.cp == at.cp && g.at.pp == at.pp && g.at.dp == at.dp && g.at.ep == at.ep &&
               g.at.expert_dp == at.expert_dp;
      });
      if (same == list.end()) {
        list.push_back({at, dim, p.at("global_shape").get<std::vector<int64_t>>(), {}});
        same = list.end() - 1;
      } else {
        same->at.ranks.push_back(rank);
      }
      if (!grads.count(name) || !weights.count(name))
        throw InputError("loom verify: rank " + std::to_string(rank) + "'s first-step files lack '" + name + "'");
      same->parts.push_back({c.at("tp").get<int64_t>(), grads.at(name), weights.at(name)});
    }
  }
  for (auto& [name, list] : groups) {
    auto& param = dump.params.at(name);
    for (auto& g : list) {
      std::sort(g.parts.begin(), g.parts.end(), [](const Part& a, const Part& b) { return a.tp < b.tp; });
      Replica r{g.at, g.parts[0].gradient, g.parts[0].weight};
      if (g.dim >= 0) {
        if (static_cast<int64_t>(g.parts.size()) != dump.sizes.tp)
          throw InputError("loom verify: '" + name + "' has " + std::to_string(g.parts.size()) + " tp parts, not " +
                           std::to_string(dump.sizes.tp));
        std::vector<torch::Tensor> gs, ws;
        for (const auto& part : g.parts) gs.push_back(part.gradient), ws.push_back(part.weight);
        const int64_t length = g.shape[static_cast<size_t>(g.dim)];  // a padded vocabulary's padding cut off
        r.gradient = torch::cat(gs, g.dim).narrow(g.dim, 0, length);
        r.weight = torch::cat(ws, g.dim).narrow(g.dim, 0, length);
      }
      param.replicas.push_back(std::move(r));
    }
  }
  return dump;
}

struct StepRecord {
  double loss = 0.0, lr = 0.0, grad_norm = 0.0;
  std::vector<double> tokens_per_expert;  // every MoE layer's, flattened (empty: dense)
};

std::map<int64_t, StepRecord> read_metrics(const std::string& run_dir) {
  const std::string path = run_dir + "/metrics.jsonl";
  std::ifstream in(path);
  if (!in) throw InputError("loom verify: " + path + " is missing");
  std::map<int64_t, StepRecord> steps;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto row = nlohmann::json::parse(line);
    if (!row.contains("step") || !row.contains("loss")) continue;
    StepRecord record{row.at("loss").get<double>(), row.value("lr", 0.0), row.value("grad_norm", 0.0), {}};
    if (row.contains("moe") && row.at("moe").contains("tokens_per_expert")) {
      for (const auto& layer : row.at("moe").at("tokens_per_expert"))
        for (const auto& n : layer) record.tokens_per_expert.push_back(n.get<double>());
    }
    steps[row.at("step").get<int64_t>()] = record;
  }
  return steps;
}

// One token's choice moved between two experts: a near-tie of two scores, not a layout's fault.
bool one_choice_moved(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  double moved = 0.0;
  for (size_t i = 0; i < a.size(); ++i) moved += std::abs(a[i] - b[i]);
  return moved == 2.0;
}

// AdamW's first step per unit of lr, c g / (c |g| + eps), for the clipping factor C.
torch::Tensor first_adam_step(const torch::Tensor& g, double c, double eps) {
  auto scaled = g.to(torch::kFloat64) * c;
  return scaled / (scaled.abs() + eps);
}

// The weights' difference beyond what AdamW's first step makes of the gradients' own difference,
// relative to the largest reference weight.
double weight_difference(const torch::Tensor& wa, const torch::Tensor& wb, const torch::Tensor& ga,
                         const torch::Tensor& gb, const VerifyRuns& runs, double lr, double ca, double cb) {
  if (wa.numel() == 0) return 0.0;
  auto excess = (wa.to(torch::kFloat64) - wb.to(torch::kFloat64)).abs() -
                lr * (first_adam_step(ga, ca, runs.adam_eps) - first_adam_step(gb, cb, runs.adam_eps)).abs();
  const double diff = excess.clamp_min(0).max().item<double>();
  const double scale = wb.abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

// Replicas of one tensor over dp or cp: the same tp part (or both joined) and stage, and for an
// expert the same ep rank (a dense parameter's dp replicas sit at every ep coordinate).
bool replicas_of_one_place(const Coords& a, const Coords& b, bool expert) {
  return a.tp == b.tp && a.pp == b.pp && (!expert || a.ep == b.ep);
}

}  // namespace

std::string describe_place(const ParameterPlace& p, const LayoutSizes& sizes) {
  std::vector<std::string> parts;
  if (sizes.tp > 1) {
    const bool vocabulary = p.name == "wte.weight" || p.name == "lm_head.weight";
    if (p.tp_split_dim == 0)
      parts.push_back(vocabulary ? "vocabulary-split over tp" : "column-split over tp");
    else if (p.tp_split_dim > 0)
      parts.push_back("row-split over tp");
    else
      parts.push_back(p.summed_over_tp ? "replicated over tp (its gradient summed over tp)" : "replicated over tp");
  }
  if (p.expert && sizes.ep > 1) parts.push_back("expert on ep rank " + std::to_string(p.ep_rank));
  if (sizes.pp > 1) parts.push_back("stage " + std::to_string(p.stage));
  if (sizes.cp > 1) parts.push_back("replicated over cp");
  if (!p.expert && sizes.dp > 1) parts.push_back("replicated over dp");
  if (p.expert && sizes.dp / sizes.ep > 1) parts.push_back("replicated over expert-dp");
  if (parts.empty()) return "whole on one rank";
  std::string text = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) text += ", " + parts[i];
  return text;
}

VerifyVerdict compare_verify_runs(const VerifyRuns& runs) {
  VerifyVerdict v;
  const std::string tol = sci(runs.rtol) + " relative (" + runs.tolerance_of + ")";
  const auto layout_steps = read_metrics(runs.layout_dir), reference_steps = read_metrics(runs.reference_dir);

  // Losses step by step, up to a routing flip.
  int64_t loss_differs = 0, flip = 0;
  bool rounded_apart = false;  // the flip: routing moved by the layout's rounding of step 1's update
  double worst_loss = 0.0;
  int64_t worst_loss_step = 1, compared = 0;
  for (int64_t step = 1; step <= runs.steps; ++step) {
    if (!layout_steps.count(step) || !reference_steps.count(step))
      throw InputError("loom verify: step " + std::to_string(step) + " is missing from a run's metrics.jsonl");
    const auto &a = layout_steps.at(step), &b = reference_steps.at(step);
    if (a.tokens_per_expert != b.tokens_per_expert) {
      const bool one_moved = one_choice_moved(a.tokens_per_expert, b.tokens_per_expert);
      if (runs.rounds && step >= 2 && !one_moved) {
        flip = step;
        rounded_apart = true;
      } else if (!one_moved) {
        v.report.push_back("routing: the tokens per expert differ at step " + std::to_string(step) +
                           " by more than one moved choice");
        if (!loss_differs) loss_differs = step;
      } else {
        flip = step;
      }
      break;
    }
    const double d = std::abs(a.loss - b.loss) / std::max(std::abs(b.loss), 1e-30);
    if (d > worst_loss) worst_loss = d, worst_loss_step = step;
    if (d > runs.rtol && !loss_differs) loss_differs = step;
    ++compared;
  }
  // Only the steps before the routing differed were compared (none when it differed at step 1).
  v.report.push_back(compared == 0 ? std::string("losses: none compared (the routing differed at step 1)")
                                   : "losses: " + std::to_string(compared) + " steps compared, largest difference " +
                                         sci(worst_loss) + " at step " + std::to_string(worst_loss_step));

  // Step 1's gradients and updated weights (not comparable after a flip at step 1).
  Dump layout = read_dump(runs.layout_dir);
  const Dump reference = read_dump(runs.reference_dir);
  std::vector<Parameter*> differing;
  std::string dp_disagreement, tp_disagreement;
  size_t replicas = 0;
  double worst_gradient = 0.0, worst_weight = 0.0;
  // Each run's clipping factor at step 1 (its dumps are from before clipping).
  auto clipping = [&](const StepRecord& r) {
    return runs.grad_clip > 0 && r.grad_norm > runs.grad_clip ? runs.grad_clip / (r.grad_norm + 1e-6) : 1.0;
  };
  const double lr = reference_steps.at(1).lr;
  const double ca = clipping(layout_steps.at(1)), cb = clipping(reference_steps.at(1));
  if (flip != 1) {
    for (const auto& name : reference.order) {
      if (!layout.params.count(name)) throw InputError("loom verify: the layout's run has no parameter '" + name + "'");
      auto& param = layout.params.at(name);
      const auto& ref = reference.params.at(name).replicas.at(0);
      for (const auto& r : param.replicas) {
        param.gradient_error = std::max(param.gradient_error, relative(r.gradient, ref.gradient, name));
        if (runs.adamw) {
          relative(r.weight, ref.weight, name);  // (the shapes)
          param.weight_error = std::max(
              param.weight_error, weight_difference(r.weight, ref.weight, r.gradient, ref.gradient, runs, lr, ca, cb));
        }
        ++replicas;
      }
      worst_gradient = std::max(worst_gradient, param.gradient_error);
      worst_weight = std::max(worst_weight, param.weight_error);
      if (param.gradient_error > runs.rtol || param.weight_error > runs.rtol) differing.push_back(&param);
      // Replicas that should hold the same gradient and do not.
      const auto& rs = param.replicas;
      for (size_t i = 0; i < rs.size(); ++i) {
        for (size_t j = i + 1; j < rs.size(); ++j) {
          if (relative(rs[j].gradient, rs[i].gradient, name) <= runs.rtol) continue;
          const std::string pair =
              name + " on ranks " + std::to_string(rs[i].at.ranks[0]) + " and " + std::to_string(rs[j].at.ranks[0]);
          if (replicas_of_one_place(rs[i].at, rs[j].at, param.place.expert) && dp_disagreement.empty())
            dp_disagreement = pair;
          const bool across_tp = rs[i].at.tp != rs[j].at.tp && rs[i].at.cp == rs[j].at.cp &&
                                 rs[i].at.dp == rs[j].at.dp && rs[i].at.pp == rs[j].at.pp && rs[i].at.ep == rs[j].at.ep;
          if (across_tp && tp_disagreement.empty()) tp_disagreement = pair;
        }
      }
    }
    v.report.push_back("step 1 gradients: " + std::to_string(reference.order.size()) + " parameters on " +
                       std::to_string(replicas) + " replicas, largest difference " + sci(worst_gradient));
    v.report.push_back(runs.adamw ? "step 1 updated weights: largest difference beyond AdamW's first step of the "
                                    "gradients' own " +
                                        sci(worst_weight)
                                  : "step 1 updated weights: not compared (Muon's update is not AdamW's)");
  }

  if (!loss_differs && differing.empty()) {
    v.equal = true;
    v.line = "verdict: equal within " + tol + ": losses over " + std::to_string(compared) + " steps" +
             (flip == 1    ? ""
              : runs.adamw ? ", step 1's gradients and updated weights of every parameter on every replica"
                           : ", step 1's gradients of every parameter on every replica (weights not compared: Muon)");
    if (flip && rounded_apart) {
      v.line += "; routing apart at step " + std::to_string(flip) + " (the layout rounds by design, " +
                runs.tolerance_of +
                ": step 1's update moved the router's scores by that rounding and some choices with them, not a "
                "layout fault; later steps not compared)";
    } else if (flip) {
      v.line += "; routing flipped at step " + std::to_string(flip) +
                " (one token's choice moved between two experts scored within rounding: a near-tie, not a layout "
                "fault; later steps not compared)";
    }
    return v;
  }

  // The parameters that differ most, and the dimension to suspect.
  const auto& s = layout.sizes;
  std::sort(differing.begin(), differing.end(), [](const Parameter* a, const Parameter* b) {
    return std::max(a->gradient_error, a->weight_error) > std::max(b->gradient_error, b->weight_error);
  });
  std::string dim, why;
  int64_t last_stage = -1;
  for (const auto* p : differing) last_stage = std::max(last_stage, p->place.stage);
  const Parameter* worst = differing.empty() ? nullptr : differing.front();
  if (!dp_disagreement.empty()) {
    dim = s.dp > 1 ? "dp" : "cp";
    why = "replicas disagree (" + dp_disagreement + "): suspect the " + dim + " gradient reduction";
  } else if (!tp_disagreement.empty()) {
    dim = "tp";
    why = "copies of a tp-replicated parameter disagree (" + tp_disagreement + "): suspect the tp collectives";
  } else if (s.pp > 1 && worst && last_stage < s.pp - 1) {
    dim = "pp";
    why = "stages after " + std::to_string(last_stage) + " agree: suspect the pipeline send between stages " +
          std::to_string(last_stage) + " and " + std::to_string(last_stage + 1);
  } else if (worst && worst->place.expert && s.ep > 1) {
    dim = "ep";
    why = "suspect the experts' all-to-all over ep";
  } else if (worst && worst->place.tp_split_dim >= 0 && s.tp > 1) {
    dim = "tp";
    why = "suspect the tp forward or backward";
  } else {
    for (const auto& [d, size] :
         {std::pair<const char*, int64_t>{"cp", s.cp}, {"tp", s.tp}, {"ep", s.ep}, {"pp", s.pp}, {"dp", s.dp}}) {
      if (size > 1 && dim.empty()) dim = d;
    }
    why = dim.empty()   ? "one process: nothing parallel to suspect"
          : dim == "tp" ? "suspect the tp forward or backward"
                        : "suspect the " + dim + " collectives";
  }
  // Name at least one parameter split over the suspected dimension.
  std::vector<const Parameter*> named(differing.begin(), differing.begin() + std::min<size_t>(3, differing.size()));
  auto split_over = [&](const Parameter* p) {
    if (dim == "tp") return p->place.tp_split_dim >= 0;
    if (dim == "ep") return p->place.expert;
    return true;
  };
  if (std::none_of(named.begin(), named.end(), split_over)) {
    auto it = std::find_if(differing.begin(), differing.end(), split_over);
    if (it != differing.end()) named.push_back(*it);
  }
  for (const auto* p : named) {
    v.report.push_back("  " + p->place.name + ": " + describe_place(p->place, s) + "; gradient " +
                       sci(p->gradient_error) + ", weight " + sci(p->weight_error) + " relative");
  }
  const int64_t first = !differing.empty() || !loss_differs ? 1 : loss_differs;
  v.line = "verdict: differs from step " + std::to_string(first) + " (tolerance " + tol + ")";
  if (!named.empty()) {
    // The one named in the verdict is split over the suspected dimension where one differs.
    auto it = std::find_if(named.begin(), named.end(), split_over);
    const auto* p = it != named.end() ? *it : named.front();
    v.line += ": " + p->place.name + ": " + describe_place(p->place, s) + "; " +
              sci(std::max(p->gradient_error, p->weight_error)) + " relative";
  }
  v.line += ": " + why;
  return v;
}

}  // namespace loom::launch
