// The training settings a checkpoint records, and what a resume that changes them is told
// (launch/training_record.h).
#include <catch2/catch.hpp>

#include "core/config.h"
#include "launch/training_record.h"

using namespace loom;
using namespace loom::launch;

TEST_CASE("a resume that changes a recorded training setting names it with both values", "[training_record]") {
  Config saved_config;
  saved_config.train.precision = TrainPrecision::bf16;
  saved_config.train.global_batch_size = 32;
  const nlohmann::json saved = training_settings_record(saved_config);
  CHECK(saved.at("train.precision") == "bf16");
  CHECK(saved.at("train.global_batch_size") == "32");
  CHECK(saved.contains("model.moe.aux_loss_coeff"));
  CHECK_FALSE(saved.contains("parallel.tp"));  // the layout does not change the numbers

  Config same = saved_config;
  same.parallel.tp = 2;
  same.train.recompute = Recompute::full;
  CHECK(training_settings_change(same, saved).empty());

  Config changed = saved_config;
  changed.train.precision = TrainPrecision::fp32;
  changed.train.global_batch_size = 64;
  changed.train.grad_clip = 0.5;
  CHECK(training_settings_change(changed, saved) ==
        "train.precision bf16 -> fp32, train.global_batch_size 32 -> 64, train.grad_clip 1 -> 0.5");

  // Muon's keys count only for a run that trains with Muon.
  Config muon_lr = saved_config;
  muon_lr.train.muon.momentum = 0.9;
  CHECK(training_settings_change(muon_lr, saved).empty());
  muon_lr.train.optimizer = OptimizerKind::muon;
  CHECK(training_settings_change(muon_lr, saved) == "train.muon.momentum 0.95 -> 0.9");

  // A checkpoint from before the record, or one without a key recorded since, says nothing of it.
  CHECK(training_settings_change(changed, nlohmann::json()).empty());
  nlohmann::json older = saved;
  older.erase("train.precision");
  CHECK(training_settings_change(changed, older) == "train.global_batch_size 32 -> 64, train.grad_clip 1 -> 0.5");
}
