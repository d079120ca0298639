// Fitting the collective cost model to collectives_bench JSON (harness/project/collective_fit.hpp):
// synthetic runs with known alpha and bandwidth, malformed files refused with one exact message,
// and the committed H200 run at world size 1.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/project/collective_fit.hpp"
#include "harness/version.hpp"

namespace shardbench {
namespace {

using json = nlohmann::json;

struct Truth {
  const char* variant;
  CollectiveOp op;
  double alpha_us;
  double busbw_gbps;
};

// A collectives_bench run at `world` ranks whose times follow t = alpha + wire / busbw exactly,
// 1 MiB to 1 GiB by 4, as the benchmark writes it (real_time in us, counters, string context).
json synthetic_run(int world, const std::vector<Truth>& truths) {
  json doc = {{"context",
               {{"backend", "nccl"},
                {"world_size", std::to_string(world)},
                {"device", "NVIDIA H200"},
                {"dtype", "bf16"}}},
              {"benchmarks", json::array()}};
  for (const Truth& truth : truths) {
    for (int64_t bytes = 1 << 20; bytes <= (int64_t{1} << 30); bytes *= 4) {
      const double seconds =
          truth.alpha_us * 1e-6 + wire_bytes(truth.op, bytes, world) / (truth.busbw_gbps * 1e9);
      const CollectiveBandwidth bw = collective_bandwidth(truth.op, bytes, seconds, world);
      doc["benchmarks"].push_back(
          {{"name", std::string(truth.variant) + "/bf16/ranks:" + std::to_string(world) +
                        "/bytes:" + std::to_string(bytes) + "/manual_time"},
           {"run_type", "iteration"},
           {"iterations", 100},
           {"real_time", seconds * 1e6},
           {"cpu_time", seconds * 1e6 + 3},
           {"time_unit", "us"},
           {"algbw", bw.algbw_gbps},
           {"busbw", bw.busbw_gbps},
           {"bytes", static_cast<double>(bytes)}});
    }
  }
  return doc;
}

const std::vector<Truth> kTruths = {
    {"all_gather", CollectiveOp::kAllGather, 20.0, 300.0},
    {"reduce_scatter_sum", CollectiveOp::kReduceScatter, 25.0, 280.0},
    {"all_reduce_sum", CollectiveOp::kAllReduce, 30.0, 250.0},
};

TEST(MeasureCollectiveFit, AlphaBetaLeastSquares) {
  // Exact line: recovered.
  AlphaBetaFit f = fit_alpha_beta({0, 1e6, 4e6}, {10e-6, 20e-6, 50e-6});
  EXPECT_NEAR(f.alpha_s, 10e-6, 1e-15);
  EXPECT_NEAR(f.seconds_per_byte, 1e-11, 1e-20);
  // Through the origin: the free fit would go below alpha = 0; the bound holds.
  f = fit_alpha_beta({1e6, 2e6, 4e6}, {9e-6, 21e-6, 40e-6});
  EXPECT_EQ(f.alpha_s, 0.0);
  EXPECT_GT(f.seconds_per_byte, 0.0);
  // Every point at the same size (one rank: nothing on the wire): only alpha.
  f = fit_alpha_beta({0, 0, 0}, {30e-6, 30e-6, 30e-6});
  EXPECT_NEAR(f.alpha_s, 30e-6, 1e-15);
  EXPECT_EQ(f.seconds_per_byte, 0.0);
  // Time falling with size: no bandwidth to speak of.
  f = fit_alpha_beta({1e6, 1e9}, {40e-6, 30e-6});
  EXPECT_EQ(f.seconds_per_byte, 0.0);
  EXPECT_THROW(fit_alpha_beta({1.0}, {}), std::invalid_argument);
  EXPECT_THROW(fit_alpha_beta({1.0}, {0.0}), std::invalid_argument);
}

TEST(MeasureCollectiveFit, RecoversKnownAlphaAndBandwidth) {
  json doc = synthetic_run(4, kTruths);
  // A --benchmark_repetitions aggregate is not a measurement of its own.
  json aggregate = doc["benchmarks"][0];
  aggregate["run_type"] = "aggregate";
  aggregate["real_time"] = 1e9;
  doc["benchmarks"].push_back(aggregate);
  const CollectiveBenchRun run = read_collectives_bench(doc.dump(), "synthetic.json");
  EXPECT_EQ(run.world, 4);
  EXPECT_EQ(run.backend, "nccl");
  EXPECT_EQ(run.device, "NVIDIA H200");
  ASSERT_EQ(run.fits.size(), 3u);
  for (const Truth& truth : kTruths) {
    const CollectiveFit& f = run.fit(truth.variant);
    EXPECT_EQ(f.op, truth.op);
    EXPECT_EQ(f.samples.size(), 6u) << truth.variant;
    EXPECT_NEAR(f.alpha_s * 1e6, truth.alpha_us, 1e-6) << truth.variant;
    EXPECT_NEAR(f.bandwidth_gbps, truth.busbw_gbps, 1e-6) << truth.variant;
    EXPECT_LT(f.max_relative_residual, 1e-9) << truth.variant;
  }
  // At 1 GiB the fitted bandwidth is what busbw approaches as alpha fades.
  EXPECT_NEAR(run.fit("all_gather").samples.back().busbw_gbps, 300.0, 300.0 * 0.01);

  // In the model: the fits become the intra-node costs. Base latency = alpha less the 3 (6 for
  // all-reduce) ring steps at 4 ranks times NVLink's 3.4 us.
  const CollectiveModel base = table_model(interconnect("nvlink4"), interconnect("ib_ndr"));
  const CollectiveModel m = with_measured_intra_node(base, run);
  EXPECT_NEAR(m.op(CollectiveOp::kAllGather).intra.bandwidth_gbps, 300.0, 1e-6);
  EXPECT_NEAR(m.op(CollectiveOp::kAllGather).base_latency_us, 20.0 - 3 * 3.4, 1e-6);
  EXPECT_NEAR(m.op(CollectiveOp::kAllReduce).base_latency_us, 30.0 - 6 * 3.4, 1e-6);
  EXPECT_NEAR(m.op(CollectiveOp::kAllReduce).inter.bandwidth_gbps, 47.0, 1e-9);
  // Back at 4 ranks the model reproduces the measurement; at 8 it adds 4 steps.
  const int64_t bytes = 64 << 20;
  EXPECT_NEAR(collective_time(m, CollectiveOp::kAllGather, bytes, make_placement(4, 8)).seconds,
              20e-6 + 0.75 * bytes / 300e9, 1e-12);
  EXPECT_NEAR(collective_time(m, CollectiveOp::kAllGather, bytes, make_placement(8, 8)).seconds,
              20e-6 + 4 * 3.4e-6 + 0.875 * bytes / 300e9, 1e-12);
  EXPECT_NE(m.source.find("measured (all_gather, reduce_scatter_sum, all_reduce_sum) at world "
                          "size 4 on nccl NVIDIA H200 from synthetic.json"),
            std::string::npos)
      << m.source;
  try {
    with_measured_intra_node(base, run, {"reduce_scatter_sum", "reduce_scatter_sum", "x"});
    FAIL() << "a reduce-scatter accepted for all-gather";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "measured variant 'reduce_scatter_sum' runs reduce_scatter; expected a variant "
                 "of all_gather");
  }
  try {
    with_measured_intra_node(base, run, {"all_gather_in_place"});
    FAIL() << "a variant the file lacks accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "collectives_bench JSON 'synthetic.json' has no variant 'all_gather_in_place'; "
                 "it holds all_gather, reduce_scatter_sum, all_reduce_sum");
  }
}

// One malformed field at a time, each refused with the file, the field and the value.
std::string refusal(const json& doc) {
  try {
    read_collectives_bench(doc.dump(), "bad.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(MeasureCollectiveFit, RefusesMalformedJson) {
  const json good = synthetic_run(2, {kTruths[0], kTruths[2]});
  const std::string prefix = "collectives_bench JSON 'bad.json': ";

  json doc = good;
  doc["benchmarks"][1]["bytes"] = "abc";
  EXPECT_EQ(refusal(doc),
            prefix + "benchmarks[1].bytes is \"abc\"; expected a number > 0 (the message size S)");

  doc = good;
  doc["benchmarks"][2].erase("real_time");
  EXPECT_EQ(refusal(doc), prefix +
                              "benchmarks[2].real_time is missing; expected a number > 0 "
                              "(the time per iteration)");

  doc = good;
  doc["benchmarks"][0]["time_unit"] = "h";
  EXPECT_EQ(refusal(doc),
            prefix + "benchmarks[0].time_unit is \"h\"; expected one of ns, us, ms, s");

  doc = good;
  doc["context"]["world_size"] = "eight";
  EXPECT_EQ(refusal(doc), prefix + "context.world_size is \"eight\"; expected an integer >= 1");

  doc = good;
  doc["context"].erase("world_size");
  EXPECT_EQ(refusal(doc), prefix + "context.world_size is missing; expected an integer >= 1");

  doc = good;
  doc["benchmarks"][0]["name"] = "broadcast/bf16/ranks:2/bytes:1048576";
  EXPECT_EQ(refusal(doc),
            prefix +
                "benchmarks[0].name is \"broadcast/bf16/ranks:2/bytes:1048576\"; expected a "
                "collectives_bench variant: all_gather, all_gather_in_place, reduce_scatter_sum, "
                "reduce_scatter_avg, reduce_scatter_sum_in_place, reduce_scatter_avg_in_place, "
                "all_reduce_sum, all_reduce_avg");

  doc = good;
  doc["benchmarks"][3]["name"] = "all_gather/bf16/ranks:8/bytes:1048576/manual_time";
  EXPECT_EQ(refusal(doc), prefix +
                              "benchmarks[3].name is "
                              "\"all_gather/bf16/ranks:8/bytes:1048576/manual_time\"; expected "
                              "ranks:2 as context.world_size says");

  doc = good;
  doc["benchmarks"][0]["busbw"] = 2 * doc["benchmarks"][0]["busbw"].get<double>();
  const std::string busbw_refusal = refusal(doc);
  EXPECT_EQ(busbw_refusal.rfind(prefix + "benchmarks[0].busbw is ", 0), 0u) << busbw_refusal;
  EXPECT_NE(busbw_refusal.find("; expected bytes / time x nccl-tests factor = "), std::string::npos)
      << busbw_refusal;

  doc = good;
  doc["benchmarks"][0]["error_occurred"] = true;
  doc["benchmarks"][0]["error_message"] = "rank 1: NCCL timeout";
  EXPECT_EQ(refusal(doc), prefix +
                              "benchmarks[0].error_occurred is true (\"rank 1: NCCL "
                              "timeout\"); expected a run that completed");

  doc = good;
  doc["benchmarks"] = json::array();
  EXPECT_EQ(refusal(doc),
            prefix + "benchmarks is []; expected a non-empty array of benchmark entries");

  try {
    read_collectives_bench("{\"context\": ", "bad.json");
    FAIL() << "truncated text accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(prefix + "the text is not JSON (", 0), 0u) << what;
    EXPECT_NE(what.find("); expected Google Benchmark JSON (--benchmark_out_format=json)"),
              std::string::npos)
        << what;
  }
  try {
    load_collectives_bench("/nonexistent/collectives.json");
    FAIL() << "missing file accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "collectives_bench JSON '/nonexistent/collectives.json': the file is missing or "
                 "unreadable; expected a file written by collectives_bench --benchmark_out=<file>");
  }
}

// results/h200/collectives_ws1.json: one H200, NCCL. At one rank nothing crosses a link (busbw 0,
// wire bytes 0), so the run gives the per-call floor (launch, wait, CUDA events) and no
// bandwidth; the out-of-place variants also pay a device-local copy that grows with size, which
// is not wire traffic and which an alpha-only fit cannot follow.
TEST(MeasureCollectiveFit, CommittedH200WorldSizeOne) {
  const CollectiveBenchRun run = load_collectives_bench(std::string(source_dir()) +
                                                        "/results/h200/collectives_ws1.json");
  EXPECT_EQ(run.world, 1);
  EXPECT_EQ(run.backend, "nccl");
  EXPECT_EQ(run.device, "NVIDIA H200");
  ASSERT_EQ(run.fits.size(), 8u);
  for (const CollectiveFit& f : run.fits) {
    EXPECT_EQ(f.bandwidth_gbps, 0.0) << f.variant << ": no bandwidth is measurable at one rank";
    EXPECT_EQ(f.samples.size(), 6u) << f.variant;
    for (const CollectiveSample& s : f.samples) EXPECT_EQ(s.busbw_gbps, 0.0) << f.variant;
  }
  // Variants that move nothing at one rank: a flat 26-40 us floor.
  for (const char* variant : {"all_gather_in_place", "reduce_scatter_sum_in_place",
                              "reduce_scatter_avg_in_place", "all_reduce_sum"}) {
    const CollectiveFit& f = run.fit(variant);
    EXPECT_GT(f.alpha_s, 25e-6) << variant;
    EXPECT_LT(f.alpha_s, 35e-6) << variant;
    EXPECT_LT(f.max_relative_residual, 0.1) << variant;
  }
  // all_gather out of place copies 1 GiB locally in 532 us: far off any constant.
  EXPECT_GT(run.fit("all_gather").max_relative_residual, 0.5);

  // In the model the floor becomes the base latency and NVLink's bandwidth stays the table's.
  const CollectiveModel base = table_model(interconnect("nvlink4"), interconnect("ib_ndr"));
  const CollectiveModel m = with_measured_intra_node(
      base, run, {"all_gather_in_place", "reduce_scatter_sum_in_place", "all_reduce_sum"});
  const double floor_us = run.fit("all_reduce_sum").alpha_s * 1e6;
  EXPECT_NEAR(m.op(CollectiveOp::kAllReduce).base_latency_us, floor_us, 1e-9);
  EXPECT_NEAR(m.op(CollectiveOp::kAllReduce).intra.bandwidth_gbps, 370.8, 1e-9);
  EXPECT_NE(m.source.find("world size 1: latency only, bandwidth from the table"),
            std::string::npos);
  EXPECT_NEAR(
      collective_time(m, CollectiveOp::kAllReduce, int64_t{1} << 30, make_placement(8, 8)).seconds,
      (floor_us + 14 * 3.4) * 1e-6 + 1.75 * (int64_t{1} << 30) / 370.8e9, 1e-12);
}

}  // namespace
}  // namespace shardbench
