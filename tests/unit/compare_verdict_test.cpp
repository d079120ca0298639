// Matching and verdicts: regression, inconclusive, improvement, NaN loss, failed run, memory,
// unmatched runs, loss parity, and the thresholds file.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/compare/compare_sides.hpp"
#include "harness/compare/report_reader.hpp"
#include "tests/compare/fixtures.hpp"

namespace shardbench {
namespace {

using compare_fixtures::ddp_run;
using compare_fixtures::FixtureRun;
using compare_fixtures::fsdp_run;
using compare_fixtures::noisy_steps;
using compare_fixtures::steady_steps;
using nlohmann::json;

std::vector<RunView> views(const std::vector<FixtureRun>& runs, const std::string& file,
                           const MatchOptions& match = {}) {
  return runs_of(LoadedReport{file, compare_fixtures::make_report(runs), false}, match);
}

CompareResult compare(const std::vector<FixtureRun>& base, const std::vector<FixtureRun>& head,
                      const Thresholds& t = {}) {
  // One run per side in most tests here: a calibration with no run-to-run noise keeps the
  // step-level interval as it is (the noise model has its own tests).
  return compare_sides(views(base, "base.json"), views(head, "head.json"), t, "",
                       compare_fixtures::quiet_noise());
}

TEST(CompareMatching, MatchesByIdentityAndListsTheRest) {
  FixtureRun fsdp_ws4 = fsdp_run(steady_steps(20, 20));
  fsdp_ws4.world_size = 4;
  FixtureRun optim = fsdp_run(steady_steps(20, 20));
  optim.strategy = "optim";
  optim.label = "megatron_fsdp/optim";
  const CompareResult r =
      compare({fsdp_run(steady_steps(20, 20)), ddp_run(steady_steps(18, 20)), optim},
              {ddp_run(steady_steps(18, 20)), fsdp_run(steady_steps(20, 20)), fsdp_ws4});
  ASSERT_EQ(r.pairs.size(), 2u);
  EXPECT_EQ(r.pairs[0].head_runs[0].label, "ddp+distopt");  // head order
  EXPECT_EQ(r.pairs[1].head_runs[0].label, "megatron_fsdp/optim_grads_params");
  ASSERT_EQ(r.unmatched_head.size(), 1u);
  EXPECT_NE(r.unmatched_head[0].name.find("ws4"), std::string::npos);
  ASSERT_EQ(r.unmatched_base.size(), 1u);
  EXPECT_EQ(r.unmatched_base[0].label, "megatron_fsdp/optim");
  // A run on one side only fails the comparison unless allowed.
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CompareMatching, UnmatchedRunsFailUnlessAllowed) {
  // The head lost its DDP run: present in base, absent in head.
  const std::vector<FixtureRun> base = {fsdp_run(steady_steps(20, 20)),
                                        ddp_run(steady_steps(18, 20))};
  const std::vector<FixtureRun> head = {fsdp_run(steady_steps(20, 20))};
  const CompareResult r = compare(base, head);
  ASSERT_EQ(r.unmatched_base.size(), 1u);
  EXPECT_EQ(r.pairs.at(0).verdict, Verdict::kOk);
  EXPECT_EQ(r.exit_code(), 1);
  Thresholds allow;
  allow.allow_unmatched = true;
  EXPECT_EQ(compare(base, head, allow).exit_code(), 0);
  // .. and the other way round: a new run on the head side only.
  EXPECT_EQ(compare(head, base).exit_code(), 1);
  EXPECT_EQ(compare(head, base, allow).exit_code(), 0);
}

TEST(CompareMatching, GpuDtypeAndConfigArePartOfTheIdentity) {
  FixtureRun h100 = fsdp_run(steady_steps(20, 20));
  h100.device = "NVIDIA H100";
  FixtureRun h200 = fsdp_run(steady_steps(20, 20));
  h200.device = "NVIDIA H200";
  EXPECT_THROW(compare({h100}, {h200}), InputError);
  MatchOptions ignore_gpu{{"gpu", "device", "backend"}, {}};
  const CompareResult r =
      compare_sides(views({h100}, "a", ignore_gpu), views({h200}, "b", ignore_gpu), {});
  EXPECT_EQ(r.pairs.size(), 1u);

  FixtureRun bf16 = fsdp_run(steady_steps(20, 20));
  bf16.compute_dtype = "bf16";
  EXPECT_THROW(compare({fsdp_run(steady_steps(20, 20))}, {bf16}), InputError);
}

TEST(CompareMatching, Fp8AndItsTransposeCacheArePartOfTheIdentity) {
  FixtureRun fp8 = fsdp_run(steady_steps(20, 20));
  fp8.compute_dtype = "bf16";
  fp8.fp8 = "hybrid/tensorwise";
  fp8.fp8_transpose_cache = "rebuilt";
  FixtureRun bf16 = fsdp_run(steady_steps(20, 20));
  bf16.compute_dtype = "bf16";
  EXPECT_THROW(compare({bf16}, {fp8}), InputError);
  FixtureRun kept = fp8;
  kept.fp8_transpose_cache = "kept";
  EXPECT_THROW(compare({fp8}, {kept}), InputError);
  EXPECT_EQ(compare({fp8}, {fp8}).pairs.size(), 1u);

  // A report from before the fp8 fields existed matches a bf16 run that records them as null.
  nlohmann::json old_report = compare_fixtures::make_report({bf16});
  for (auto& run : old_report["runs"]) {
    run["identity"].erase("fp8");
    run["identity"].erase("fp8_transpose_cache");
  }
  const auto old_views = runs_of(LoadedReport{"old.json", old_report, false}, {});
  const CompareResult r = compare_sides(old_views, views({bf16}, "new.json"), {});
  EXPECT_EQ(r.pairs.size(), 1u);
}

TEST(CompareMatching, NothingMatchedNamesBothSides) {
  try {
    compare({ddp_run(steady_steps(20, 10))}, {fsdp_run(steady_steps(20, 10))});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nothing matched"), std::string::npos);
    EXPECT_NE(m.find("ddp+distopt"), std::string::npos);
    EXPECT_NE(m.find("head.json"), std::string::npos);
  }
}

TEST(CompareMatching, NothingMatchedNamesTheDifferingIdentityFieldsAndTheFlags) {
  // Base and head differ only in a config field of the identity: their labels look the same.
  FixtureRun base = fsdp_run(steady_steps(20, 10));
  FixtureRun head = fsdp_run(steady_steps(20, 10));
  json base_report = compare_fixtures::make_report({base});
  json head_report = compare_fixtures::make_report({head});
  head_report["runs"][0]["config"]["model"]["recompute_granularity"] = "full";
  try {
    compare_sides(runs_of(LoadedReport{"base.json", base_report, false}),
                  runs_of(LoadedReport{"head.json", head_report, false}), {});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("differ in 1 identity field:"), std::string::npos) << m;
    EXPECT_NE(m.find("config.model.recompute_granularity: base "), std::string::npos) << m;
    EXPECT_NE(m.find("head \"full\""), std::string::npos) << m;
    EXPECT_NE(m.find("--ignore_identity config.model.recompute_granularity"), std::string::npos)
        << m;
  }
  // The suggested flag makes them match.
  MatchOptions ignore;
  ignore.ignore_fields = {"config.model.recompute_granularity"};
  EXPECT_EQ(compare_sides(runs_of(LoadedReport{"base.json", base_report, false}, ignore),
                          runs_of(LoadedReport{"head.json", head_report, false}, ignore), {})
                .pairs.size(),
            1u);
}

TEST(CompareMatching, RunsOfOneIdentityArePooled) {
  const CompareResult r = compare({ddp_run(steady_steps(20, 10)), ddp_run(steady_steps(20, 10))},
                                  {ddp_run(steady_steps(20, 10))});
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_EQ(r.pairs[0].base_runs.size(), 2u);
  EXPECT_EQ(r.pairs[0].base_samples, 18u);  // 2 x (10 steps - 1 warm-up)
  EXPECT_EQ(r.pairs[0].head_samples, 9u);
}

TEST(CompareVerdict, SlowerAndSignificantIsARegression) {
  // 10% longer steps with +-1% wiggle: far beyond 5%, the interval excludes 0.
  const CompareResult r =
      compare({fsdp_run(steady_steps(20, 20))}, {fsdp_run(steady_steps(22, 20))});
  const PairResult& p = r.pairs.at(0);
  const MetricRow* median = p.metric("step_time_median_ms");
  ASSERT_TRUE(median);
  EXPECT_EQ(median->gate, Gate::kTiming);
  EXPECT_NEAR(*median->relative_change, 0.10, 2e-3);
  ASSERT_TRUE(median->ci_low && median->ci_high && median->detectable_change);
  EXPECT_GT(*median->ci_low, 0.05);
  EXPECT_LT(*median->ci_high, 0.15);
  EXPECT_LT(*median->detectable_change, 0.05);
  EXPECT_EQ(median->verdict, Verdict::kRegression);
  EXPECT_EQ(p.verdict, Verdict::kRegression);
  // Throughput is shown, not gated (it is a constant over the step time).
  EXPECT_EQ(p.metric("tflops_per_gpu")->gate, Gate::kNone);
  EXPECT_NEAR(*p.metric("tflops_per_gpu")->relative_change, 20.0 / 22.0 - 1, 2e-3);
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CompareVerdict, TooNoisyToTellIsInconclusive) {
  // +-40% spread on both sides, same centre: no change measured, but the interval is far wider
  // than +-5%, so "ok" would be a claim the data cannot support.
  const CompareResult r =
      compare({fsdp_run(noisy_steps(20, 20, 0.4))}, {fsdp_run(noisy_steps(20.2, 20, 0.4))});
  const PairResult& p = r.pairs.at(0);
  const MetricRow* median = p.metric("step_time_median_ms");
  EXPECT_LT(std::abs(*median->relative_change), 0.05);
  EXPECT_GT(*median->detectable_change, 0.05);
  EXPECT_EQ(median->verdict, Verdict::kInconclusive);
  EXPECT_EQ(p.verdict, Verdict::kInconclusive);
  EXPECT_NE(median->note.find("smallest detectable change"), std::string::npos);
  EXPECT_NE(median->note.find("step-time cv"), std::string::npos);
  EXPECT_EQ(r.exit_code(), kExitInconclusive);
  EXPECT_EQ(kExitInconclusive, 3);
  // A failing pair wins over an inconclusive one.
  const CompareResult both =
      compare({fsdp_run(noisy_steps(20, 20, 0.4)), ddp_run(steady_steps(20, 20))},
              {fsdp_run(noisy_steps(20.2, 20, 0.4)), ddp_run(steady_steps(23, 20))});
  EXPECT_EQ(both.exit_code(), 1);
  // Without the interval the point estimate alone decides: within 5%, ok.
  Thresholds no_interval;
  no_interval.utest = false;
  EXPECT_EQ(compare({fsdp_run(noisy_steps(20, 20, 0.4))}, {fsdp_run(noisy_steps(20.2, 20, 0.4))},
                    no_interval)
                .exit_code(),
            0);
}

TEST(CompareVerdict, BeyondThresholdButIntervalReachesZeroIsInconclusive) {
  // Head 8% slower in the median, but +-40% spread: the interval includes 0.
  const CompareResult r =
      compare({fsdp_run(noisy_steps(20, 20, 0.4))}, {fsdp_run(noisy_steps(21.6, 20, 0.4))});
  const MetricRow* median = r.pairs.at(0).metric("step_time_median_ms");
  EXPECT_GT(*median->relative_change, 0.05);
  EXPECT_LT(*median->ci_low, 0);
  EXPECT_EQ(median->verdict, Verdict::kInconclusive);
  EXPECT_NE(median->note.find("includes 0"), std::string::npos);
}

TEST(CompareVerdict, RepeatedRunsThatDisagreeAreInconclusive) {
  // Base runs at 20 and 30 ms (another job started between them), head runs at 20 and 21 ms:
  // however the pooled medians compare, run-to-run noise of 50% cannot resolve 5%.
  const CompareResult r = compare({fsdp_run(steady_steps(20, 20)), fsdp_run(steady_steps(30, 20))},
                                  {fsdp_run(steady_steps(20, 20)), fsdp_run(steady_steps(21, 20))});
  const MetricRow* median = r.pairs.at(0).metric("step_time_median_ms");
  EXPECT_EQ(median->verdict, Verdict::kInconclusive);
  EXPECT_NE(median->note.find("run medians spread 50.0% base, 5.0% head"), std::string::npos)
      << median->note;
  // Runs within the threshold of each other are judged as usual.
  EXPECT_EQ(compare({fsdp_run(steady_steps(20, 20)), fsdp_run(steady_steps(20.4, 20))},
                    {fsdp_run(steady_steps(23, 20)), fsdp_run(steady_steps(23.3, 20))})
                .pairs.at(0)
                .verdict,
            Verdict::kRegression);
}

TEST(CompareVerdict, OneSlowStepDoesNotMoveTheMedian) {
  // One step twice as long pulls an evaluation-window mean down ~8%; the median does not move.
  std::vector<double> head = steady_steps(20, 20);
  head.back() = 40;
  const CompareResult r = compare({fsdp_run(steady_steps(20, 20))}, {fsdp_run(head)});
  EXPECT_LT(*r.pairs.at(0).metric("tflops_per_gpu")->relative_change, -0.05);
  EXPECT_EQ(r.pairs[0].metric("step_time_median_ms")->verdict, Verdict::kOk);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(CompareVerdict, WithinThresholdIsOk) {
  const CompareResult r =
      compare({fsdp_run(steady_steps(20, 20))}, {fsdp_run(steady_steps(20.6, 20))});
  EXPECT_EQ(r.pairs.at(0).metric("step_time_median_ms")->verdict, Verdict::kOk);
  EXPECT_EQ(r.pairs[0].verdict, Verdict::kOk);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(CompareVerdict, FasterAndSignificantIsAnUnexpectedImprovement) {
  const CompareResult r =
      compare({fsdp_run(steady_steps(20, 20))}, {fsdp_run(steady_steps(17, 20))});
  EXPECT_EQ(r.pairs.at(0).verdict, Verdict::kImprovement);
  EXPECT_EQ(r.exit_code(), 0);  // flagged, not failing ..
  Thresholds strict;
  strict.fail_on_improvement = true;  // .. unless asked, as Megatron-Bridge's evaluate.py fails
  EXPECT_EQ(compare({fsdp_run(steady_steps(20, 20))}, {fsdp_run(steady_steps(17, 20))}, strict)
                .exit_code(),
            1);
}

TEST(CompareVerdict, NanLossFails) {
  FixtureRun head = fsdp_run(steady_steps(20, 20));
  head.nan_loss_at_iteration = 7;
  const CompareResult r = compare({fsdp_run(steady_steps(20, 20))}, {head});
  EXPECT_EQ(r.pairs.at(0).verdict, Verdict::kNan);
  ASSERT_FALSE(r.pairs[0].notes.empty());
  EXPECT_NE(r.pairs[0].notes[0].find("iteration 7"), std::string::npos);
  EXPECT_EQ(r.exit_code(), 1);
  // A NaN in the baseline is reported but does not fail the head.
  const CompareResult b = compare({head}, {fsdp_run(steady_steps(20, 20))});
  EXPECT_EQ(b.exit_code(), 0);
  EXPECT_FALSE(b.pairs[0].notes.empty());
}

TEST(CompareVerdict, FailedHeadRunFails) {
  FixtureRun head = fsdp_run(steady_steps(20, 20));
  head.failure_reasons = {"CUDA out of memory"};
  const CompareResult r = compare({fsdp_run(steady_steps(20, 20))}, {head});
  EXPECT_EQ(r.pairs.at(0).verdict, Verdict::kFailed);
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(CompareVerdict, MemoryBeyondThresholdRegressesOrImproves) {
  FixtureRun base = fsdp_run(steady_steps(20, 20));
  base.max_alloc_gb = 40.0;
  base.device = "NVIDIA H200";
  FixtureRun more = base;
  more.max_alloc_gb = 43.0;  // +7.5%
  FixtureRun less = base;
  less.max_alloc_gb = 36.0;  // -10%
  FixtureRun same = base;
  same.max_alloc_gb = 41.0;  // +2.5%
  EXPECT_EQ(compare({base}, {more}).pairs.at(0).metric("max_alloc_gb")->verdict,
            Verdict::kRegression);
  EXPECT_EQ(compare({base}, {more}).exit_code(), 1);
  EXPECT_EQ(compare({base}, {less}).pairs.at(0).metric("max_alloc_gb")->verdict,
            Verdict::kImprovement);
  EXPECT_EQ(compare({base}, {same}).pairs.at(0).metric("max_alloc_gb")->verdict, Verdict::kOk);
  EXPECT_EQ(compare({base}, {same}).pairs.at(0).metric("alloc_gb")->verdict, Verdict::kOk);
  EXPECT_TRUE(compare({base}, {same}).pairs.at(0).metric("max_reserved_gb"));
  // CPU runs have no allocator figures; the engine's static bytes are judged instead.
  FixtureRun cpu_more = fsdp_run(steady_steps(20, 20));
  cpu_more.static_bytes = (1 << 20) + (1 << 17);  // +12.5%
  const CompareResult cpu = compare({fsdp_run(steady_steps(20, 20))}, {cpu_more});
  EXPECT_FALSE(cpu.pairs.at(0).metric("max_alloc_gb"));
  EXPECT_EQ(cpu.pairs[0].metric("engine_static_bytes")->verdict, Verdict::kRegression);
  // .. and so are its transient peak bytes (FSDP's gathered buffers), the other CPU figure.
  FixtureRun cpu_peak = fsdp_run(steady_steps(20, 20));
  cpu_peak.temporary_peak_bytes = (1 << 18) + (1 << 16);  // +25%
  const CompareResult peak = compare({fsdp_run(steady_steps(20, 20))}, {cpu_peak});
  const MetricRow* row = peak.pairs.at(0).metric("engine_temporary_peak_bytes");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->gate, Gate::kMemory);
  EXPECT_NEAR(*row->relative_change, 0.25, 1e-12);
  EXPECT_EQ(row->verdict, Verdict::kRegression);
  EXPECT_EQ(peak.exit_code(), 1);
}

TEST(CompareVerdict, LossMismatchAgainstDdpFails) {
  // The head report's FSDP run drifts from its DDP baseline's loss by 1e-3 per step: its report
  // says so (comparisons[].loss_parity), and perf-compare fails the pair whatever its speed.
  FixtureRun drifting = fsdp_run(steady_steps(20, 20));
  drifting.loss_drift = 1e-3;
  const CompareResult r = compare({fsdp_run(steady_steps(20, 20)), ddp_run(steady_steps(20, 20))},
                                  {drifting, ddp_run(steady_steps(20, 20))});
  const PairResult* fsdp = nullptr;
  for (const PairResult& p : r.pairs)
    if (p.identity.value("wrapper", "") == "megatron_fsdp") fsdp = &p;
  ASSERT_TRUE(fsdp);
  EXPECT_EQ(fsdp->verdict, Verdict::kLossMismatch);
  ASSERT_EQ(fsdp->loss_parity.size(), 1u);
  EXPECT_EQ(fsdp->loss_parity[0].rfind("fail: ", 0), 0u) << fsdp->loss_parity[0];
  EXPECT_EQ(r.exit_code(), 1);
  // The same runs without the drift: parity ok, exit 0.
  const CompareResult same =
      compare({fsdp_run(steady_steps(20, 20)), ddp_run(steady_steps(20, 20))},
              {fsdp_run(steady_steps(20, 20)), ddp_run(steady_steps(20, 20))});
  for (const PairResult& p : same.pairs) {
    if (p.identity.value("wrapper", "") != "megatron_fsdp") continue;
    ASSERT_EQ(p.loss_parity.size(), 1u);
    EXPECT_EQ(p.loss_parity[0].rfind("ok: ", 0), 0u) << p.loss_parity[0];
  }
  EXPECT_EQ(same.exit_code(), 0);
}

TEST(CompareVerdict, TooFewStepsAreInconclusive) {
  // 3 steps: 2 measured samples per side; an interval from them would be a reshuffle of two
  // numbers.
  const CompareResult r = compare({fsdp_run({500, 20, 20.1})}, {fsdp_run({500, 25, 25.1})});
  EXPECT_EQ(r.pairs.at(0).verdict, Verdict::kInconclusive);
  bool noted = false;
  for (const std::string& note : r.pairs[0].notes)
    noted |= note.find("at least 5 per side") != std::string::npos;
  EXPECT_TRUE(noted);
  // Without the interval the threshold alone decides.
  Thresholds no_interval;
  no_interval.utest = false;
  EXPECT_EQ(compare({fsdp_run({500, 20, 20.1})}, {fsdp_run({500, 25, 25.1})}, no_interval)
                .pairs.at(0)
                .verdict,
            Verdict::kRegression);
}

TEST(CompareVerdict, ThresholdsComeFromFlagsOrAFile) {
  Thresholds loose;
  loose.timing_threshold = 0.15;
  EXPECT_EQ(compare({fsdp_run(steady_steps(20, 20))}, {fsdp_run(steady_steps(22, 20))}, loose)
                .exit_code(),
            0);

  compare_fixtures::TempDir dir("thresholds");
  Thresholds t;
  apply_thresholds_file(
      dir.write("t.json", json{{"timing_threshold", 0.1}, {"alpha", 0.01}, {"utest", false}}), t);
  EXPECT_DOUBLE_EQ(t.timing_threshold, 0.1);
  EXPECT_DOUBLE_EQ(t.alpha, 0.01);
  EXPECT_FALSE(t.utest);
  EXPECT_DOUBLE_EQ(t.memory_threshold, 0.05);
  try {
    apply_thresholds_file(dir.write("bad.json", json{{"timing", 0.1}}), t);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key \"timing\"; accepted: timing_threshold"),
              std::string::npos);
  }
  EXPECT_THROW(apply_thresholds_file(dir.write("range.json", json{{"alpha", 1.5}}), t), InputError);
  EXPECT_THROW(apply_thresholds_file(dir.write("type.json", json{{"alpha", "0.1"}}), t),
               InputError);
}

TEST(CompareVerdict, GoldenValuesTakeTheHeadRunsIdentity) {
  std::vector<RunView> head =
      views({fsdp_run(steady_steps(20, 20)), ddp_run(steady_steps(18, 20))}, "head.json");
  // Golden values 20% faster than the head's FSDP run: the head regressed against them.
  // (Golden step times carry the same change: 20 ms / 1.2.)
  json golden = json::object();
  for (std::size_t i = 0; i < head[0].tflops_per_gpu.size(); ++i) {
    golden[std::to_string(i)] = {
        {"lm loss", 6.0},
        {"elapsed time per iteration (ms)", 20.0 / (1.2 + 1e-4 * static_cast<double>(i))},
        {"GPU utilization", *head[0].tflops_per_gpu[i] * (1.2 + 1e-4 * static_cast<double>(i))}};
  }
  compare_fixtures::TempDir dir("golden_verdict");
  std::vector<RunView> base = runs_of(read_report(dir.write("golden.json", golden)));
  const CompareResult r = compare_sides(base, head, {});
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_EQ(r.pairs[0].head_runs[0].label, "megatron_fsdp/optim_grads_params");
  EXPECT_EQ(r.pairs[0].verdict, Verdict::kRegression);
  EXPECT_EQ(r.unmatched_head.size(), 1u);  // the DDP baseline
  // --run picks another head run; an unknown label is bad input.
  EXPECT_EQ(compare_sides(base, head, {}, "ddp+distopt").pairs.at(0).head_runs[0].label,
            "ddp+distopt");
  EXPECT_THROW(compare_sides(base, head, {}, "nope"), InputError);
}

}  // namespace
}  // namespace shardbench
