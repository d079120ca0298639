// perf-project end to end: a 1-rank CPU report with shardbench.unit_timing=true projected to 2
// ranks, and bad input refused with one line and exit status 2.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/compare/compare_cli.hpp"
#include "harness/project/projection_compare.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"
#include "tests/test_paths.hpp"

namespace shardbench {
namespace {

// The repository root: the first folder above the working directory (ctest runs in build/tests)
// that holds results/ and CMakeLists.txt.
std::filesystem::path source_root() {
  for (auto dir = std::filesystem::current_path(); !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::is_directory(dir / "results") &&
        std::filesystem::exists(dir / "CMakeLists.txt")) {
      return dir;
    }
    if (dir == dir.parent_path()) break;
  }
  return {};
}

class PerfProject : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() /
           ("sb_perf_project_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const testing_util::LaunchResult r = testing_util::run_perf_launch(
        "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 3 --use_megatron_fsdp true "
        "shardbench.unit_timing=true shardbench.report_path=" + (dir_ / "ws1.json").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { testing_util::remove_tree(dir_); }
  static testing_util::LaunchResult project(const std::string& args) {
    return testing_util::run_shell(std::string(SHARDBENCH_PERF_PROJECT) + " " + args + " 2>&1");
  }
  static std::filesystem::path dir_;
};

std::filesystem::path PerfProject::dir_;

TEST_F(PerfProject, ProjectsEveryRunAndMarksItProjected) {
  const std::string out = (dir_ / "p2.json").string();
  const auto r = project((dir_ / "ws1.json").string() + " -ng 2 -g cpu --interconnect nvlink4 -o " +
                         out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["kind"], "shardbench_projection");
  ASSERT_EQ(j["runs"].size(), 2U);  // Megatron FSDP and its DDP baseline
  for (const auto& run : j["runs"]) {
    EXPECT_EQ(run["identity"]["projected"], true);
    EXPECT_EQ(run["identity"]["world_size"], 2);
    EXPECT_EQ(run["projected_from"]["world_size"], 1);
    EXPECT_GT(run["step_ms"].get<double>(), 0);
    EXPECT_FALSE(run["collectives"].empty()) << run["label"];
    // Every projection states the largest errors seen in validation, each naming its results.
    ASSERT_TRUE(run["validation"].is_array()) << run["label"];
    for (const auto& seen : run["validation"]) {
      const std::string text = seen.get<std::string>();
      if (text.find("not validated") != std::string::npos) continue;
      const size_t at = text.find("(results/");
      ASSERT_NE(at, std::string::npos) << text;
      const std::string folder = text.substr(at + 1, text.find(')', at) - at - 1);
      EXPECT_TRUE(std::filesystem::is_directory(source_root() / folder)) << folder;
    }
  }
  // FSDP at 2 ranks gathers its units; the 1-rank run gathered nothing.
  EXPECT_EQ(j["runs"][0]["collectives"][0]["name"], "all_gather/unit_0");
  // Peak memory per GPU at 2 ranks (docs/projection.md "Peak memory per GPU"): FSDP's static
  // buffers below the 1-rank run's, its transient buffers the simulator's; the CPU report has no
  // allocator peak, so no total.
  for (const auto& run : j["runs"]) {
    const auto& peak = run["memory"]["projected_peak"];
    EXPECT_EQ(peak["world_size"], 2) << run["label"];
    EXPECT_GT(peak["static_bytes"].get<int64_t>(), 0) << run["label"];
    EXPECT_LT(peak["static_bytes"].get<int64_t>(),
              peak["measured"]["predicted_static_bytes"].get<int64_t>())
        << run["label"];
    EXPECT_EQ(peak["saved_activation_bytes"], peak["measured"]["saved_activation_bytes"]);
    EXPECT_TRUE(peak["max_allocated_bytes"].is_null()) << run["label"];
    EXPECT_FALSE(peak.contains("fits")) << "a CPU target has no memory capacity";
  }
  EXPECT_EQ(j["runs"][0]["memory"]["projected_peak"]["transient_source"], "step_simulator");
  EXPECT_GT(j["runs"][0]["memory"]["projected_peak"]["transient_buffer_bytes"].get<int64_t>(), 0);
}

TEST_F(PerfProject, BadInputIsOneLineAndExitTwo) {
  const std::string report = (dir_ / "ws1.json").string();
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {report + " -ng 2 -g h100 --interconnect nvlink4", "-g h100"},
      {report + " -ng 2 -g cpu --interconnect nvlink9", "nvlink9"},
      {report + " -ng 2 -g cpu", "no interconnect"},
      {report + " -ng 2 -g cpu -gb 3 --interconnect nvlink4", "-gb 3"},
      {(dir_ / "missing.json").string() + " -ng 2 -g cpu --interconnect nvlink4", "cannot be read"},
  };
  for (const Case& c : cases) {
    const auto r = project(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  }
}


nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump();
}

// The label of the report's run with this wrapper.
std::string run_label(const nlohmann::json& report, const std::string& wrapper) {
  for (const auto& run : report["runs"]) {
    if (run["identity"]["wrapper"] == wrapper) return run["label"].get<std::string>();
  }
  return {};
}

// docs/projection.md "HSDP targets": the 1-rank Megatron FSDP run projected to 4 ranks in 2
// instances of 2, with each outer strategy.
TEST_F(PerfProject, HsdpTargetRunsTheOuterCollectivesOfEveryGroup) {
  const std::string report = (dir_ / "ws1.json").string();
  const nlohmann::json measured = read_json(report);
  const std::string fsdp = run_label(measured, "megatron_fsdp");
  ASSERT_FALSE(fsdp.empty());
  const int layers = measured["runs"][0]["config"]["model"]["num_layers"].get<int>();
  std::vector<std::string> groups;
  for (int i = 0; i < layers; ++i) groups.push_back("unit_" + std::to_string(i));
  groups.push_back("root");
  std::map<std::string, nlohmann::json> projected;
  for (const std::string outer : {"no_shard", "optim"}) {
    const std::string out = (dir_ / ("hsdp_" + outer + ".json")).string();
    const auto r = project(report + " -ng 4 --dp_instances 2 --outer_dp_sharding_strategy " +
                           outer + " -g cpu --interconnect nvlink4 --run '" + fsdp + "' -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = read_json(out);
    ASSERT_EQ(j["runs"].size(), 1U);
    const nlohmann::json& run = j["runs"][0];
    EXPECT_EQ(run["identity"]["world_size"], 4);
    EXPECT_EQ(run["target"]["dp_instances"], 2);
    EXPECT_EQ(run["target"]["outer_dp_sharding_strategy"], outer);
    EXPECT_EQ(run["memory"]["projected_peak"]["dp_instances"], 2);
    std::set<std::string> names;
    for (const auto& c : run["collectives"]) names.insert(c["name"].get<std::string>());
    // The instance of 2 ranks gathers its units.
    EXPECT_TRUE(names.count("all_gather/unit_0")) << run["collectives"].dump();
    for (const std::string& g : groups) {
      if (outer == "no_shard") {
        EXPECT_TRUE(names.count("outer_all_reduce/" + g)) << g;
        EXPECT_FALSE(names.count("outer_reduce_scatter/" + g)) << g;
      } else {
        EXPECT_TRUE(names.count("outer_reduce_scatter/" + g)) << g;
        EXPECT_TRUE(names.count("outer_all_gather/" + g)) << g;
        EXPECT_FALSE(names.count("outer_all_reduce/" + g)) << g;
      }
    }
    projected[outer] = run;
  }
  // HFSDP shards the main weights and optimizer state across the instances too.
  EXPECT_LT(projected["optim"]["memory"]["projected_peak"]["static_bytes"].get<int64_t>(),
            projected["no_shard"]["memory"]["projected_peak"]["static_bytes"].get<int64_t>());
  // The launcher's spelling of the instance count is accepted.
  const auto alias = project(report +
                             " -ng 4 --ddp.num_distributed_optimizer_instances 2 -g cpu "
                             "--interconnect nvlink4 --run '" +
                             fsdp + "'");
  ASSERT_EQ(alias.exit_code, 0) << alias.output;
  EXPECT_EQ(nlohmann::json::parse(alias.output)["runs"][0]["step_ms"],
            projected["no_shard"]["step_ms"]);
}

TEST_F(PerfProject, HsdpTargetRefusesWhatTheEngineRefuses) {
  const std::string report = (dir_ / "ws1.json").string();
  nlohmann::json measured = read_json(report);
  const std::string fsdp = run_label(measured, "megatron_fsdp");
  const std::string ddp = run_label(measured, "ddp");
  ASSERT_FALSE(fsdp.empty());
  ASSERT_FALSE(ddp.empty());
  // The Megatron FSDP run as if measured with optim_grads.
  for (auto& run : measured["runs"]) {
    if (run["label"] == fsdp) run["identity"]["strategy"] = "optim_grads";
  }
  const std::string other = (dir_ / "optim_grads.json").string();
  write_json(other, measured);
  const std::string tail = " -g cpu --interconnect nvlink4";
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {report + " -ng 4 --dp_instances 2" + tail, "identity.wrapper=ddp"},
      {report + " -ng 4 --dp_instances 2 --run '" + ddp + "'" + tail, "identity.wrapper=ddp"},
      {report + " -ng 4 --dp_instances 3 --run '" + fsdp + "'" + tail, "a divisor of 4"},
      {report + " -ng 4 --dp_instances 0 --run '" + fsdp + "'" + tail, "--dp_instances 0"},
      {other + " -ng 4 --dp_instances 2 --outer_dp_sharding_strategy optim --run '" + fsdp + "'" +
           tail,
       "identity.strategy=optim_grads;"},
      {report + " -ng 4 --outer_dp_sharding_strategy optim --run '" + fsdp + "'" + tail,
       "--dp_instances 1"},
      {report + " -ng 4 --dp_instances 2 --outer_dp_sharding_strategy full --run '" + fsdp + "'" +
           tail,
       "accepted: no_shard or optim"},
  };
  for (const Case& c : cases) {
    const std::string out = (dir_ / "refused.json").string();
    const auto r = project(c.args + " -o " + out);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
  }
  // Outer no_shard takes optim_grads.
  const auto r = project(other + " -ng 4 --dp_instances 2 --run '" + fsdp + "'" + tail);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// docs/projection.md "Layer extrapolation": the 2-layer run projected as a 5-layer model gathers
// five units at 2 ranks and carries three more layers' parameters, FLOPs and saved activations.
TEST_F(PerfProject, LayerExtrapolationAddsTheLayersUnitsParametersAndActivations) {
  const std::string report = (dir_ / "ws1.json").string();
  const std::string two = (dir_ / "l2.json").string(), five = (dir_ / "l5.json").string();
  ASSERT_EQ(project(report + " -ng 2 -g cpu --interconnect nvlink4 -o " + two).exit_code, 0);
  const auto r = project(report + " -ng 2 -g cpu --interconnect nvlink4 --num_layers 5 -o " + five);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json a = read_json(two)["runs"][0], b = read_json(five)["runs"][0];
  const auto units = [](const nlohmann::json& run) {
    std::set<std::string> names;
    for (const auto& c : run["collectives"]) {
      const std::string n = c["name"];
      if (n.rfind("all_gather/unit_", 0) == 0) names.insert(n);
    }
    return names.size();
  };
  EXPECT_EQ(units(a), 2U);
  EXPECT_EQ(units(b), 5U);
  const auto& ext = b["layer_extrapolation"];
  EXPECT_EQ(ext["measured_layers"], 2);
  EXPECT_EQ(ext["layers"], 5);
  EXPECT_EQ(
      b["identity"]["num_parameters"].get<int64_t>(),
      a["identity"]["num_parameters"].get<int64_t>() + ext["added_parameters"].get<int64_t>());
  EXPECT_GT(ext["added_parameters"].get<int64_t>(), 0);
  EXPECT_GT(b["identity"]["model_flops_per_step"].get<double>(),
            a["identity"]["model_flops_per_step"].get<double>());
  const auto& pa = a["memory"]["projected_peak"];
  const auto& pb = b["memory"]["projected_peak"];
  EXPECT_EQ(pb["saved_activation_bytes"].get<int64_t>(),
            pa["saved_activation_bytes"].get<int64_t>() +
                ext["added_saved_activation_bytes"].get<int64_t>());
  EXPECT_GT(ext["added_saved_activation_bytes"].get<int64_t>(), 0);
  EXPECT_GT(pb["static_bytes"].get<int64_t>(), pa["static_bytes"].get<int64_t>());
  EXPECT_GT(b["compute_ms"].get<double>(), a["compute_ms"].get<double>());
  // Fewer layers than measured: refused.
  const auto fewer = project(report + " -ng 2 -g cpu --interconnect nvlink4 --num_layers 1");
  EXPECT_EQ(fewer.exit_code, 2) << fewer.output;
  EXPECT_NE(fewer.output.find("--num_layers 1"), std::string::npos) << fewer.output;
}

// Full recompute of every measured layer extrapolates (the added layers are recomputed too); of
// only some of them it is refused, naming the field.
TEST_F(PerfProject, LayerExtrapolationTakesRecomputeOfEveryLayerAndRefusesSome) {
  for (int rl : {2, 1}) {
    const std::string report = (dir_ / ("rl" + std::to_string(rl) + ".json")).string();
    const testing_util::LaunchResult launched = testing_util::run_perf_launch(
        "-m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 2 -rl " + std::to_string(rl) +
        " shardbench.compare_with_ddp=false shardbench.unit_timing=true shardbench.report_path=" +
        report);
    ASSERT_EQ(launched.exit_code, 0) << launched.output;
    const std::string out = (dir_ / ("rl" + std::to_string(rl) + "_l6.json")).string();
    const auto r =
        project(report + " -ng 2 -g cpu --interconnect nvlink4 --num_layers 6 -o " + out);
    if (rl == 2) {
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(read_json(out)["runs"][0]["layer_extrapolation"]["layers"], 6);
    } else {
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find("model.recompute_num_layers=1 of 2 layers"), std::string::npos)
          << r.output;
    }
  }
}

// docs/projection.md "Another GPU type": the CPU report relabelled as an H200 run, with a kernel
// summary of known classes, projected to the H100: its compute grows by the memory-bound share
// times the bandwidth ratio (the dense peaks are equal), no more, no less.
TEST_F(PerfProject, ComputeScalesToAnotherGpuTypeByKernelClass) {
  nlohmann::json report = read_json((dir_ / "ws1.json").string());
  for (auto& run : report["runs"]) run["identity"]["device"] = "NVIDIA H200";
  const std::string h200 = (dir_ / "as_h200.json").string();
  write_json(h200, report);
  const std::string kernels = (dir_ / "k.kernels.json").string();
  write_json(kernels, {{"kind", "device_activities"},
                       {"rows",
                        {{{"name", "nvjet_sm90_gemm"}, {"us_per_step", 700.0}},
                         {{"name", "elementwise_kernel"}, {"us_per_step", 300.0}},
                         {{"name", "ncclDevKernel_AllGather"}, {"us_per_step", 50.0}}}}});
  const std::string label = report["runs"][0]["label"];
  const std::string same = (dir_ / "same.json").string(), h100 = (dir_ / "h100.json").string();
  const std::string common = h200 + " --run " + label + " -ng 1 --interconnect nvlink4 -o ";
  ASSERT_EQ(project(common + same + " -g h200").exit_code, 0);
  const auto r = project(common + h100 + " -g h100 --kernels " + kernels);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json a = read_json(same)["runs"][0], b = read_json(h100)["runs"][0];
  const double module = (700 + 300 * 4.8 / 3.35) / 1000, optimizer = 4.8 / 3.35;
  EXPECT_NEAR(b["compute_scaling"]["module_factor"].get<double>(), module, 1e-12);
  EXPECT_NEAR(b["compute_scaling"]["optimizer_factor"].get<double>(), optimizer, 1e-12);
  EXPECT_FALSE(a.contains("compute_scaling"));
  // One rank: the step is all compute, modules and optimizer each scaled by their factor.
  const double ratio = b["compute_ms"].get<double>() / a["compute_ms"].get<double>();
  EXPECT_GT(ratio, module - 1e-9);
  EXPECT_LT(ratio, optimizer + 1e-9);
  EXPECT_EQ(b["identity"]["projected_device"], "h100");
  // The tiny model fits one GPU of either type; the capacity is the target's.
  EXPECT_EQ(a["memory"]["projected_peak"]["device_memory_bytes"], int64_t{141} << 30);
  EXPECT_EQ(b["memory"]["projected_peak"]["device_memory_bytes"], int64_t{80} << 30);
  // Another GPU type without a kernel summary, a summary for a report of two runs without --run,
  // a summary for the measured device: refused, naming what is accepted.
  const auto none = project(h200 + " -ng 1 -g h100 --interconnect nvlink4");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.output.find("--kernels"), std::string::npos) << none.output;
  const auto two = project(h200 + " -ng 1 -g h100 --interconnect nvlink4 --kernels " + kernels);
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.output.find("--run LABEL"), std::string::npos) << two.output;
  const auto measured = project(common + h100 + " -g h200 --kernels " + kernels);
  EXPECT_EQ(measured.exit_code, 2);
  EXPECT_NE(measured.output.find("another GPU type"), std::string::npos) << measured.output;

  // --calibrate: a reference run's summaries on both devices set each class's ratio (GEMMs 1.02,
  // memory-bound 1.25, the optimizer 1.3); the report says where the ratios came from.
  const std::string ref_from = (dir_ / "ref_h200.kernels.json").string();
  const std::string ref_to = (dir_ / "ref_h100.kernels.json").string();
  write_json(ref_from, {{"kind", "device_activities"},
                        {"rows",
                         {{{"name", "nvjet_sm90_gemm"}, {"us_per_step", 1000.0}},
                          {{"name", "elementwise_kernel"}, {"us_per_step", 400.0}},
                          {{"name", "multi_tensor_apply_adam"}, {"us_per_step", 100.0}}}}});
  write_json(ref_to, {{"kind", "device_activities"},
                      {"rows",
                       {{{"name", "nvjet_sm90_gemm"}, {"us_per_step", 1020.0}},
                        {{"name", "elementwise_kernel"}, {"us_per_step", 500.0}},
                        {{"name", "multi_tensor_apply_adam"}, {"us_per_step", 130.0}}}}});
  const std::string cal = (dir_ / "cal.json").string();
  const auto c = project(common + cal + " -g h100 --kernels " + kernels + " --calibrate " +
                         ref_from + " " + ref_to);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const nlohmann::json cs = read_json(cal)["runs"][0]["compute_scaling"];
  EXPECT_NEAR(cs["module_factor"].get<double>(), (700 * 1.02 + 300 * 1.25) / 1000, 1e-12);
  EXPECT_NEAR(cs["optimizer_factor"].get<double>(), 1.3, 1e-12);
  EXPECT_EQ(cs["ratio_source"], "calibrated");
  EXPECT_EQ(cs["datasheet_classes"], nlohmann::json::array({"attention"}));
  EXPECT_EQ(b["compute_scaling"]["ratio_source"], "datasheet");
  // One file, a bad summary, or a calibration for the measured device: refused, naming it.
  const auto one =
      project(common + cal + " -g h100 --kernels " + kernels + " --calibrate " + ref_from);
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("--calibrate"), std::string::npos) << one.output;
  const auto bad = project(common + cal + " -g h100 --kernels " + kernels + " --calibrate " +
                           ref_from + " " + h200);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--calibrate '" + h200 + "'"), std::string::npos) << bad.output;
  const auto same_device =
      project(common + cal + " -g h200 --calibrate " + ref_from + " " + ref_to);
  EXPECT_EQ(same_device.exit_code, 2);
  EXPECT_NE(same_device.output.find("--calibrate with -g h200"), std::string::npos)
      << same_device.output;
}

// The A100 rows (issue 42's published points past 64 GPUs): the CPU report relabelled as an H200
// run, projected to 16 A100s in nodes of 8 over NVLink 3 and HDR. Compute scales by 989 / 312 for
// the GEMMs and 4.8 / 2.039 for the rest; the first all-gather crosses two nodes, so the ring is
// bound by the node's 8 x 24 = 192 GB/s (below NVLink 3's 240) with alpha = 8.4 + 14 x 3.4 + 14 =
// 70 us. An FP8 run is refused: the A100 has no FP8 tensor cores.
TEST_F(PerfProject, ProjectsToA100sOverNvlink3AndHdrAndRefusesFp8There) {
  nlohmann::json report = read_json((dir_ / "ws1.json").string());
  for (auto& run : report["runs"]) run["identity"]["device"] = "NVIDIA H200";
  const std::string h200 = (dir_ / "a100_from_h200.json").string();
  write_json(h200, report);
  const std::string kernels = (dir_ / "a100.kernels.json").string();
  write_json(kernels, {{"kind", "device_activities"},
                       {"rows",
                        {{{"name", "nvjet_sm90_gemm"}, {"us_per_step", 700.0}},
                         {{"name", "elementwise_kernel"}, {"us_per_step", 300.0}}}}});
  const std::string label = report["runs"][0]["label"];
  const std::string out = (dir_ / "a100.json").string();
  const auto r = project(h200 + " --run " + label + " -ng 16 -gn 8 -g a100 --kernels " + kernels +
                         " --interconnect nvlink3,ib_hdr -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json run = read_json(out)["runs"][0];
  EXPECT_NEAR(run["compute_scaling"]["module_factor"].get<double>(),
              (700 * 989.0 / 312 + 300 * 4.8 / 2.039) / 1000, 1e-12);
  EXPECT_NEAR(run["compute_scaling"]["optimizer_factor"].get<double>(), 4.8 / 2.039, 1e-12);
  EXPECT_EQ(run["identity"]["projected_device"], "a100");
  EXPECT_EQ(run["memory"]["projected_peak"]["device_memory_bytes"], int64_t{80} << 30);
  const nlohmann::json& gather = run["collectives"][0];
  ASSERT_EQ(gather["op"], "all_gather") << gather.dump();
  const double bytes = gather["bytes"].get<double>();
  EXPECT_NEAR(gather["end_ms"].get<double>() - gather["start_ms"].get<double>(),
              (70e-6 + bytes * 15 / 16 / 192e9) * 1e3, 1e-9);
  // The 40 GB part has its own bandwidth and capacity.
  const auto r40 = project(h200 + " --run " + label + " -ng 16 -gn 8 -g a100_40gb --kernels " +
                           kernels + " --interconnect nvlink3,ib_hdr -o " + out);
  ASSERT_EQ(r40.exit_code, 0) << r40.output;
  EXPECT_NEAR(read_json(out)["runs"][0]["compute_scaling"]["optimizer_factor"].get<double>(),
              4.8 / 1.555, 1e-12);
  EXPECT_EQ(read_json(out)["runs"][0]["memory"]["projected_peak"]["device_memory_bytes"],
            int64_t{40} << 30);
  // An FP8 run to the A100: one line naming the device, exit 2.
  for (auto& run_json : report["runs"]) run_json["identity"]["fp8"] = "hybrid";
  const std::string fp8 = (dir_ / "a100_fp8.json").string();
  write_json(fp8, report);
  const auto refused = project(fp8 + " --run " + label + " -ng 16 -gn 8 -g a100 --kernels " +
                               kernels + " --interconnect nvlink3,ib_hdr");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("a100 has no FP8 tensor cores"), std::string::npos)
      << refused.output;
}

// docs/projection.md "Sweep": every cell of the sweep is the single-target projection of the same
// report at the same world size and interconnect, number for number.
TEST_F(PerfProject, SweepEntriesEqualSingleTargetProjections) {
  const std::string report = (dir_ / "ws1.json").string();
  const std::string out = (dir_ / "sweep.json").string();
  const std::string page = (dir_ / "sweep.html").string();
  const auto r = project(report + " --sweep 4,1,2 -g cpu --interconnect 'nvlink4;nvlink5,ib_xdr'" +
                         " --interconnect nvlink4,ib_ndr -o " + out + " --html " + page);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("crossover (exposed > 5% of the step)"), std::string::npos) << r.output;
  const nlohmann::json j = read_json(out);
  EXPECT_EQ(j["kind"], "shardbench_projection_sweep");
  EXPECT_EQ(j["exposed_threshold"], 0.05);
  ASSERT_EQ(j["sweep"].size(), 2U * 3U * 3U);  // runs x interconnects x world sizes
  ASSERT_EQ(j["crossover"].size(), 2U * 3U);
  size_t checked = 0;
  for (const std::string ic : {"nvlink4", "nvlink5,ib_xdr", "nvlink4,ib_ndr"}) {
    for (int n : {1, 2, 4}) {
      const std::string single = (dir_ / ("single_" + std::to_string(n) + ".json")).string();
      const auto s = project(report + " -ng " + std::to_string(n) + " -g cpu --interconnect " +
                             ic + " -o " + single);
      ASSERT_EQ(s.exit_code, 0) << s.output;
      const nlohmann::json projection = read_json(single);
      for (const auto& run : projection["runs"]) {
        for (const auto& e : j["sweep"]) {
          if (e["label"] != run["label"] || e["interconnect"] != ic || e["world_size"] != n) {
            continue;
          }
          ++checked;
          EXPECT_EQ(e["step_ms"], run["step_ms"]) << ic << " " << n;
          EXPECT_EQ(e["exposed_comm_ms"], run["exposed_comm_ms"]) << ic << " " << n;
          EXPECT_EQ(e["exposed_fraction"].get<double>(),
                    run["exposed_comm_ms"].get<double>() / run["step_ms"].get<double>());
          EXPECT_EQ(e["tokens_per_s_per_rank"], run["tokens_per_s_per_rank"]);
          EXPECT_EQ(e["peak_max_allocated_bytes"],
                    run["memory"]["projected_peak"]["max_allocated_bytes"]);
        }
      }
    }
  }
  EXPECT_EQ(checked, j["sweep"].size());
  // The page: one series per run and interconnect, nothing fetched from elsewhere.
  std::ifstream in(page);
  std::stringstream html;
  html << in.rdbuf();
  const std::string h = html.str();
  size_t series = 0;
  for (size_t at = h.find("class=\"series\""); at != std::string::npos;
       at = h.find("class=\"series\"", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 2U * 3U);
  for (const char* external : {"http:", "https:", "<script", "src=", "href=", "url(", "<link"}) {
    EXPECT_EQ(h.find(external), std::string::npos) << external;
  }
}

// A report whose answer is known: with the measured compute (modules and optimizer) scaled down
// 10^4 times, one rank exposes nothing (nothing is gathered or reduced) and from 2 ranks on
// communication is most of the step, so the crossover is N = 2; scaled up 10^4 times, no world
// size crosses.
TEST_F(PerfProject, SweepCrossoverIsTheFirstWorldOverTheThreshold) {
  for (const double scale : {1e-4, 1e4}) {
    nlohmann::json report = read_json((dir_ / "ws1.json").string());
    for (auto& run : report["runs"]) {
      for (const char* key : {"forward_ms", "backward_ms"}) {
        for (auto& module : run["unit_timing"][key]) {
          for (auto& t : module) t = t.get<double>() * scale;
        }
      }
      for (const char* key : {"optimizer_ms", "optimizer_ns_per_byte"}) {
        auto& t = run["unit_timing"][key];
        ASSERT_TRUE(t.is_number()) << key;
        t = t.get<double>() * scale;
      }
    }
    const std::string path = (dir_ / "scaled.json").string();
    std::ofstream(path) << report.dump();
    const std::string out = (dir_ / "scaled_sweep.json").string();
    const auto r = project(path + " --sweep 1,2,4,8 -g cpu --interconnect nvlink4 -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json j = read_json(out);
    ASSERT_EQ(j["crossover"].size(), 2U);
    for (const auto& c : j["crossover"]) {
      if (scale < 1) {
        EXPECT_EQ(c["world_size"], 2) << c;
      } else {
        EXPECT_TRUE(c["world_size"].is_null()) << c;
      }
    }
    for (const auto& e : j["sweep"]) {
      if (scale > 1) continue;
      if (e["world_size"] == 1) {
        EXPECT_LE(e["exposed_fraction"].get<double>(), 0.05) << e;
      } else {
        EXPECT_GT(e["exposed_fraction"].get<double>(), 0.05) << e;
      }
    }
  }
}

TEST_F(PerfProject, SweepBadInputIsOneLineExitTwoAndWritesNothing) {
  const std::string report = (dir_ / "ws1.json").string();
  const std::string out = (dir_ / "bad_sweep.json").string();
  const std::string page = (dir_ / "bad_sweep.html").string();
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"--sweep '' --interconnect nvlink4", "--sweep '': the list is empty"},
      {"--sweep 8,0 --interconnect nvlink4", "--sweep '8,0': '0' is not a world size"},
      {"--sweep 8,-8 --interconnect nvlink4", "'-8' is not a world size"},
      {"--sweep 8,12 -gn 8 --interconnect nvlink4", "12 is not a multiple of -gn 8"},
      {"--sweep 2,4 --interconnect 'nvlink4;nvlink9'", "--interconnect nvlink9"},
      {"--sweep 2,4 --interconnect nvlink4 --interconnect ib_ndr,nvlink9", "nvlink9"},
      {"--sweep 2,4 --interconnect 'nvlink4;'", "an empty spec"},
      {"--sweep 2,4 --interconnect nvlink4 --exposed_threshold 1.5", "--exposed_threshold"},
      {"--sweep 2,4 -ng 2 --interconnect nvlink4", "with --sweep"},
      {"-ng 2 --interconnect nvlink4 --interconnect nvlink5", "only with --sweep"},
      {"-ng 2 --interconnect nvlink4", "--html without --sweep"},
  };
  for (const Case& c : cases) {
    const auto r = project(report + " -g cpu " + c.args + " -o " + out + " --html " + page);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_TRUE(r.output.find("accepted") != std::string::npos ||
                r.output.find("expected") != std::string::npos)
        << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
    EXPECT_FALSE(std::filesystem::exists(page)) << c.args;
  }
}

// docs/projection.md "Projected next to measured": perf-compare shows a projection beside the
// measured report, figure by figure, with no verdict, in either order; two projections, or a
// projection in a folder of reports, are never taken for a measurement.
TEST_F(PerfProject, PerfCompareShowsAProjectionBesideTheMeasurementWithoutAVerdict) {
  const std::string report = (dir_ / "ws1.json").string();
  const std::string projected = (dir_ / "p1.json").string();
  ASSERT_EQ(project(report + " -ng 1 -g cpu --interconnect nvlink4 -o " + projected).exit_code, 0);
  const auto compare = [](std::vector<std::string> args) {
    std::ostringstream out, err;
    const int code = perf_compare_main(args, out, err, false, render_projection_comparison);
    return std::make_pair(code, out.str() + err.str());
  };
  for (const auto& args :
       {std::vector<std::string>{report, projected}, std::vector<std::string>{projected, report}}) {
    const auto [code, text] = compare(args);
    EXPECT_EQ(code, 0) << text;
    EXPECT_NE(text.find("no verdict: a projection is not a measurement"), std::string::npos)
        << text;
    EXPECT_NE(text.find("step ms (median)"), std::string::npos) << text;
    EXPECT_EQ(text.find("regression"), std::string::npos) << text;
  }
  const auto [json_code, json_text] = compare({report, projected, "--format", "json"});
  ASSERT_EQ(json_code, 0) << json_text;
  const nlohmann::json j = nlohmann::json::parse(json_text);
  EXPECT_TRUE(j["verdict"].is_null());
  ASSERT_EQ(j["runs"].size(), 2U);  // Megatron FSDP and its DDP baseline
  const nlohmann::json measured = read_json(report), p1 = read_json(projected);
  const auto& step = j["runs"][0]["figures"]["step_ms"];
  EXPECT_EQ(step["measured"], measured["runs"][0]["summary"]["step_time_ms"]["median"]);
  EXPECT_EQ(step["projected"], p1["runs"][0]["step_ms"]);
  EXPECT_DOUBLE_EQ(step["error"].get<double>(),
                   step["projected"].get<double>() / step["measured"].get<double>() - 1);
  // A projection missing what it must hold: one line naming the file and the field.
  const std::string broken = (dir_ / "broken_projection.json").string();
  write_json(broken, {{"kind", "shardbench_projection"}, {"runs", {{{"identity", {}}}}}});
  const auto [broken_code, broken_text] = compare({report, broken});
  EXPECT_EQ(broken_code, 2);
  EXPECT_NE(broken_text.find("broken_projection.json: /runs/0/label is missing"),
            std::string::npos)
      << broken_text;
  const auto [both, both_text] = compare({projected, projected});
  EXPECT_EQ(both, 2);
  EXPECT_NE(both_text.find("both are perf-project projections"), std::string::npos) << both_text;
  // In a folder, the projection is skipped as not a report: the measured runs compare with
  // themselves, never with the projection.
  const std::filesystem::path folder = dir_ / "mixed";
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(projected, folder / "p1.json");
  std::filesystem::copy_file(report, folder / "ws1.json");
  const auto [folder_code, folder_text] = compare({report, folder.string()});
  EXPECT_NE(folder_text.find("p1.json"), std::string::npos) << folder_text;  // listed as skipped
  EXPECT_EQ(folder_text.find("no verdict: a projection"), std::string::npos) << folder_text;
  (void)folder_code;
}

}  // namespace
}  // namespace shardbench
