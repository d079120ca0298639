// Checkpoints through perf-launch on 2 CPU ranks: a run that saves every 2 iterations, a second
// run that resumes from the latest one, and an uninterrupted run to compare them with. The
// resumed iterations' losses are the uninterrupted run's; the reports record the saves and the
// load (times, bytes) and, for a run that loads nothing, why.
#include <gtest/gtest.h>

#include "tests/perf_launch_process.hpp"
#include "tests/remove_tree.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing_util::remove_tree;

std::string run(const std::string& args, int* exit_code) {
  const testing_util::LaunchResult r = testing_util::run_perf_launch(args);
  *exit_code = r.exit_code;
  return r.output;
}

// Like run(), with stderr only (stdout dropped).
std::string run_stderr(const std::string& args, int* exit_code) {
  const testing_util::LaunchResult r = testing_util::run_perf_launch(args, "", "2>&1 >/dev/null");
  *exit_code = r.exit_code;
  return r.output;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(CheckpointE2E, ResumedRunContinuesTheLossesAndReportsSaveAndLoad) {
  const fs::path root =
      fs::temp_directory_path() / ("shardbench_ckpt_e2e_" + std::to_string(getpid()));
  remove_tree(root);
  const fs::path ckpt = root / "ckpt";
  // The same LR schedule whatever -ms says (it would follow train_iters otherwise).
  const std::string common =
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true "
      "optimizer.lr_decay_iters=6 optimizer.lr_warmup_iters=2 checkpoint.ckpt_format=fsdp_dtensor ";
  int code = -1;

  std::string out = run(common + "-ms 6 shardbench.compare_with_ddp=false shardbench.report_path=" +
                            (root / "full.json").string(),
                        &code);
  ASSERT_EQ(code, 0) << out;
  // With the DDP baseline: only the FSDP run checkpoints.
  out = run(common + "-ms 4 --save_dir " + ckpt.string() +
                " --save_interval 2 shardbench.report_path=" + (root / "saved.json").string(),
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("successfully saved checkpoint from iteration 2 to " + ckpt.string()),
            std::string::npos)
      << out;
  out = run(common + "-ms 6 --load_dir " + ckpt.string() +
                " shardbench.compare_with_ddp=false shardbench.report_path=" +
                (root / "resumed.json").string(),
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("successfully loaded checkpoint from " + ckpt.string() + " at iteration 4"),
            std::string::npos)
      << out;

  const json full = read_json(root / "full.json")["runs"][0];
  const json saved_report = read_json(root / "saved.json");
  const json saved = saved_report["runs"][0];
  const json resumed = read_json(root / "resumed.json")["runs"][0];

  // The uninterrupted run loaded nothing, because the FSDP override set says checkpoint.load=null
  // (and nothing overrode it), and saved nothing.
  EXPECT_TRUE(full["checkpoint"]["loaded_from"].is_null());
  EXPECT_TRUE(full["checkpoint"]["load_ms"].is_null());
  EXPECT_EQ(full["checkpoint"]["load_note"],
            "checkpoint.load=null: no checkpoint was loaded (set by override set megatron_fsdp)");
  EXPECT_TRUE(full["checkpoint"]["saves"].empty());

  // Saves every 2 iterations; the last iteration (4) is one of them, so it is not saved twice.
  const json& saves = saved["checkpoint"]["saves"];
  ASSERT_EQ(saves.size(), 2u) << saves;
  for (size_t i = 0; i < 2; ++i) {
    const json& s = saves[i];
    EXPECT_EQ(s["iteration"], 2 * static_cast<int>(i + 1));
    EXPECT_EQ(s["dir"], (ckpt / (i == 0 ? "iter_0000002" : "iter_0000004")).string());
    EXPECT_GT(s["ms"].get<double>(), 0.0);
    ASSERT_EQ(s["bytes_per_rank"].size(), 2u);
    int64_t sum = s["metadata_bytes"].get<int64_t>();
    for (int r = 0; r < 2; ++r) {
      const fs::path shard =
          fs::path(s["dir"].get<std::string>()) / ("rank_0000" + std::to_string(r) + ".bin");
      EXPECT_EQ(s["bytes_per_rank"][r].get<int64_t>(), static_cast<int64_t>(fs::file_size(shard)));
      sum += s["bytes_per_rank"][r].get<int64_t>();
    }
    EXPECT_EQ(s["bytes"].get<int64_t>(), sum);
  }
  EXPECT_EQ(saved["checkpoint"]["format"], "fsdp_dtensor");
  EXPECT_EQ(saved["checkpoint"]["save_interval"], 2);
  // The DDP baseline neither saved into the FSDP run's folder nor loaded from it.
  const json baseline = saved_report["runs"][1];
  EXPECT_EQ(baseline["identity"]["wrapper"], "ddp");
  EXPECT_TRUE(baseline["checkpoint"]["save_dir"].is_null());
  EXPECT_TRUE(baseline["checkpoint"]["saves"].empty());
  EXPECT_EQ(baseline["checkpoint"]["load_note"],
            "checkpoint.load=null: no checkpoint was loaded (set by comparison run: only the "
            "requested run checkpoints)");

  // The resumed run: loaded iteration 4, ran 5 and 6.
  const json& ck = resumed["checkpoint"];
  ASSERT_FALSE(ck["loaded_from"].is_null()) << ck;
  EXPECT_EQ(ck["loaded_from"]["iteration"], 4);
  EXPECT_EQ(ck["loaded_from"]["bytes_per_rank"], saves[1]["bytes_per_rank"]);
  EXPECT_EQ(ck["load_bytes"], saves[1]["bytes"]);
  EXPECT_GT(ck["load_ms"].get<double>(), 0.0);
  ASSERT_EQ(resumed["steps"].size(), 2u);
  ASSERT_EQ(resumed["per_rank_step_ms"][0].size(), 2u);
  EXPECT_EQ(resumed["identity"]["train_iters"], 6);

  // Losses: the saving run's match the uninterrupted run's first 4, the resumed run's its last
  // 2, exactly (same binary, same ops, fp32 on the CPU).
  ASSERT_EQ(full["steps"].size(), 6u);
  ASSERT_EQ(saved["steps"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(saved["steps"][i]["loss"].get<double>(), full["steps"][i]["loss"].get<double>())
        << "iteration " << i + 1;
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed["steps"][i]["iteration"], full["steps"][i + 4]["iteration"]);
    EXPECT_EQ(resumed["steps"][i]["loss"].get<double>(), full["steps"][i + 4]["loss"].get<double>())
        << "iteration " << i + 5;
    EXPECT_EQ(resumed["steps"][i]["learning_rate"].get<double>(),
              full["steps"][i + 4]["learning_rate"].get<double>());
  }
  EXPECT_NE(full["steps"][5]["loss"].get<double>(), full["steps"][4]["loss"].get<double>());
  remove_tree(root);
}

// DeepSeek-V3's tiny CPU recipe (the sigmoid router with the expert bias, MLA, an MTP layer) at
// EP 2 on four ranks under Megatron FSDP: a run that saves after iteration 2 and one that resumes
// from it reach the losses of an uninterrupted run exactly; the checkpoint holds the expert bias.
TEST(CheckpointE2E, MoeRunResumesWithTheRoutersExpertBias) {
  const fs::path root =
      fs::temp_directory_path() / ("shardbench_moe_ckpt_e2e_" + std::to_string(getpid()));
  remove_tree(root);
  const fs::path ckpt = root / "ckpt";
  const std::string common =
      "-m deepseek -mr deepseek_v3_tiny_cpu -g cpu -ng 4 -ep 2 --use_megatron_fsdp true "
      "train.global_batch_size=8 optimizer.lr_decay_iters=4 optimizer.lr_warmup_iters=1 "
      "checkpoint.ckpt_format=fsdp_dtensor shardbench.compare_with_ddp=false ";
  int code = -1;
  std::string out =
      run(common + "-ms 4 shardbench.report_path=" + (root / "full.json").string(), &code);
  ASSERT_EQ(code, 0) << out;
  out = run(common + "-ms 2 --save_dir " + ckpt.string() +
                " shardbench.report_path=" + (root / "saved.json").string(),
            &code);
  ASSERT_EQ(code, 0) << out;
  out = run(common + "-ms 4 --load_dir " + ckpt.string() +
                " shardbench.report_path=" + (root / "resumed.json").string(),
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("successfully loaded checkpoint from " + ckpt.string() + " at iteration 2"),
            std::string::npos)
      << out;

  const json meta = read_json(ckpt / "iter_0000002" / "metadata.json");
  EXPECT_EQ(meta["layout"]["ep_size"], 2);
  // Layers 1 and 2 and the MTP layer: each its bias and its counts.
  ASSERT_EQ(meta["layout"]["model_state"].size(), 6u) << meta["layout"].dump();
  EXPECT_EQ(meta["layout"]["model_state"][0]["name"], "decoder.layers.1.mlp.router.expert_bias");
  const json full = read_json(root / "full.json")["runs"][0];
  const json resumed = read_json(root / "resumed.json")["runs"][0];
  ASSERT_EQ(full["steps"].size(), 4u);
  ASSERT_EQ(resumed["steps"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(resumed["steps"][i]["iteration"], full["steps"][i + 2]["iteration"]);
    EXPECT_EQ(resumed["steps"][i]["loss"].get<double>(), full["steps"][i + 2]["loss"].get<double>())
        << "iteration " << i + 3;
  }
  remove_tree(root);
}

TEST(CheckpointE2E, UnsupportedCheckpointSettingsAreRefusedBeforeTraining) {
  int code = -1;
  const std::string out =
      run("-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 2 --save_dir /tmp/unused_ckpt "
          "checkpoint.ckpt_format=zarr",
          &code);
  EXPECT_NE(code, 0);
  // Refused at resolution (harness/config/field_domains.cpp), before any rank starts.
  EXPECT_NE(out.find("checkpoint.ckpt_format=zarr (from override checkpoint.ckpt_format=zarr): "
                     "not implemented: torch and zarr are not implemented (torch_dist for DDP, "
                     "fsdp_dtensor for Megatron FSDP); accepted: torch_dist, fsdp_dtensor"),
            std::string::npos)
      << out;
}

// A checkpoint refused by one rank: the first rank line on stderr is that rank's own reason
// (not rank 0's "rank 1 failed"), and the launcher names the refusing rank.
TEST(CheckpointE2E, RefusingRanksOwnReasonComesFirst) {
  const fs::path root =
      fs::temp_directory_path() / ("shardbench_ckpt_refusal_" + std::to_string(getpid()));
  remove_tree(root);
  const fs::path ckpt = root / "ckpt";
  const std::string common =
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --compare_ddp false "
      "shardbench.report_dir=" +
      root.string() + " ";
  int code = -1;
  std::string out = run(common + "-ms 2 --save_dir " + ckpt.string(), &code);
  ASSERT_EQ(code, 0) << out;
  const fs::path shard = ckpt / "iter_0000002" / "rank_00001.bin";
  ASSERT_TRUE(fs::exists(shard));
  fs::resize_file(shard, fs::file_size(shard) - 8);
  out = run_stderr(common + "-ms 4 --load_dir " + ckpt.string(), &code);
  EXPECT_EQ(code, 1) << out;
  std::string first_rank_line;
  std::string last_line;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (first_rank_line.empty() && line.rfind("perf-launch: rank ", 0) == 0) first_rank_line = line;
    if (!line.empty()) last_line = line;
  }
  EXPECT_EQ(first_rank_line.rfind("perf-launch: rank 1: ", 0), 0u) << out;
  EXPECT_NE(first_rank_line.find("(truncated)"), std::string::npos) << out;
  EXPECT_EQ(last_line.rfind("perf-launch: rank 1 (pid", 0), 0u) << out;
  remove_tree(root);
}

}  // namespace
}  // namespace shardbench
