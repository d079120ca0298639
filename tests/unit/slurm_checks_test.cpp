// Slurm executor: the job shapes it accepts, the combinations it refuses (with messages that name
// the flag, the value and what is accepted), the text it reads back from sbatch and scontrol, and
// how an sbatch script's own step is told apart from its srun tasks.
#include <gtest/gtest.h>

#include <chrono>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/slurm/job_spec.hpp"
#include "harness/slurm/job_state.hpp"
#include "harness/slurm/sbatch_script.hpp"

namespace shardbench {
namespace {

using Env = std::map<std::string, std::string>;

ValidationContext clean_env() {
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return ctx;
}

ResolvedConfig resolve_slurm(const std::string& gpu, int num_gpus,
                             std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      "-m", "llama", "-mr", "llama3_8b", "-ng",        std::to_string(num_gpus),
      "-g", gpu,     "-a",  "acct",      "--executor", "slurm"};
  args.insert(args.end(), extra.begin(), extra.end());
  return resolve_from_args(args, clean_env());
}

std::string check_error(const ResolvedConfig& r) {
  try {
    check_slurm_launch(r);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

SlurmJobSpec spec_of(const ResolvedConfig& r) {
  SlurmLaunchInputs in;
  in.perf_launch_path = "/bin/perf-launch";
  in.job_dir = "/jobs/x";
  return slurm_job_spec(r, in);
}

TEST(SlurmJobShape, OneTaskPerGpuOnWholeNodes) {
  SlurmJobSpec s = spec_of(resolve_slurm("h100", 16));
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.tasks_per_node, 8);
  EXPECT_EQ(s.gpus_per_node, 8);
  s = spec_of(resolve_slurm("gb200", 8));
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.tasks_per_node, 4);
  EXPECT_EQ(s.numa_tasks_per_domain, 2);
  // Smaller than a node: one node, one task per GPU used.
  s = spec_of(resolve_slurm("gb200", 2));
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.tasks_per_node, 2);
  // -gn wins over the -g default; -g cpu requests no GPUs and binds no NUMA domains.
  s = spec_of(resolve_slurm("h100", 8, {"-gn", "4"}));
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.tasks_per_node, 4);
  const ResolvedConfig cpu = resolve_from_args(
      {"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", "4", "-g", "cpu", "-gn", "2", "-a", "a"},
      clean_env());
  s = spec_of(cpu);
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.tasks_per_node, 2);
  EXPECT_EQ(s.gpus_per_node, 0);
  EXPECT_EQ(s.numa_tasks_per_domain, 0);
  EXPECT_EQ(s.node_probe, "cpu");
}

TEST(SlurmChecks, AcceptsWellFormedJobs) {
  EXPECT_EQ(check_error(resolve_slurm("h100", 8)), "");
  EXPECT_EQ(check_error(resolve_slurm("h100", 32, {"-t", "1-00:00:00"})), "");
  EXPECT_EQ(check_error(resolve_slurm("gb200", 2)), "");
  EXPECT_EQ(check_error(resolve_slurm(
                "h100", 16, {"--additional_slurm_params", "reservation=perf; exclusive ;"})),
            "");
}

TEST(SlurmChecks, NumGpusMustFillWholeNodes) {
  EXPECT_EQ(check_error(resolve_slurm("h100", 12)),
            "-ng/--num_gpus=12 is not a multiple of -gn/--gpus_per_node=8: the Slurm executor "
            "starts one task per GPU on whole nodes, so 2 nodes would run 16 ranks; accepted: at "
            "most 8 or a multiple of 8");
  EXPECT_EQ(check_error(resolve_slurm("gb200", 6)).substr(0, 60),
            "-ng/--num_gpus=6 is not a multiple of -gn/--gpus_per_node=4:");
  // Within one node any count works.
  EXPECT_EQ(check_error(resolve_slurm("h100", 6)), "");
}

TEST(SlurmChecks, AccountIsRequired) {
  const ResolvedConfig r = resolve_from_args(
      {"-m", "llama", "-mr", "llama3_8b", "-ng", "8", "-g", "h100", "--executor", "slurm"},
      clean_env());
  EXPECT_EQ(check_error(r),
            "--executor slurm needs -a/--account: the job is charged to a Slurm account "
            "(`sacctmgr show assoc user=$USER` lists yours; a cluster without accounting accepts "
            "any name)");
}

TEST(SlurmChecks, RejectsMalformedSlurmValues) {
  EXPECT_EQ(check_error(resolve_slurm("h100", 8, {"-gn", "0"})),
            "-gn/--gpus_per_node=0 is invalid; accepted: an integer >= 1");
  EXPECT_EQ(check_error(resolve_slurm("h100", 8, {"-t", "30min"})),
            "-t/--time_limit='30min' is invalid; accepted: Slurm's MM, MM:SS, HH:MM:SS, D-HH, "
            "D-HH:MM or D-HH:MM:SS (e.g. 00:30:00)");
  EXPECT_EQ(check_error(resolve_slurm("h100", 8, {"--additional_slurm_params", "=x;mem=0"})),
            "--additional_slurm_params: invalid entry '=x' in '=x;mem=0'; accepted: key=value or "
            "key (an sbatch long option), separated by ';'");
  EXPECT_EQ(check_error(resolve_slurm("h100", 8, {"-i", "nvcr.io/nvidia/nemo:25.09"})),
            "-i is not supported by the Slurm executor: shardbench runs its own perf-launch "
            "binary (which must be on a file system every node sees), not a container; drop the "
            "flag");
  // Refused at resolution now (field_checks.cpp), with the same words.
  try {
    resolve_slurm("h100", 8, {"-en", "--profiling_ranks", "0,8"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--profiling_ranks: rank 8 is outside the job; accepted: ranks in [0, 8)");
  }
}

TEST(SlurmChecks, AdditionalParamsBecomeSbatchOptions) {
  const SlurmJobSpec s = spec_of(
      resolve_slurm("h100", 8, {"--additional_slurm_params", "gpu_bind=none;--exclusive;qos=hi"}));
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"gpu-bind", "none"}, {"exclusive", ""}, {"qos", "hi"}};
  EXPECT_EQ(s.extra_sbatch, expected);
}

TEST(SlurmChecks, UserEnvironmentIsExplicitRecipeEnvironmentIsADefault) {
  const SlurmJobSpec s =
      spec_of(resolve_slurm("h100", 8, {"-E", "NCCL_DEBUG=INFO", "-ce", "A=1,NCCL_DEBUG=WARN"}));
  const std::vector<std::pair<std::string, std::string>> explicit_env = {{"NCCL_DEBUG", "WARN"},
                                                                         {"A", "1"}};
  EXPECT_EQ(s.env_explicit, explicit_env);
  for (const auto& [name, value] : s.env_defaults) {
    EXPECT_NE(name, "NCCL_DEBUG");
    EXPECT_NE(name, "A");
  }
  EXPECT_FALSE(s.env_defaults.empty());  // the recipe's CUDA_DEVICE_MAX_CONNECTIONS, ...
}

TEST(SlurmChecks, WorkerCommandDropsDryrunAndNamesTheJobFolder) {
  const ResolvedConfig r = resolve_slurm("h100", 8, {"-d"});
  SlurmLaunchInputs in;
  in.perf_launch_path = "/opt/bin/perf-launch";
  in.args = {"-m", "llama", "-d", "-ng", "8", "--dryrun"};
  in.job_dir = "/jobs/x";
  const std::vector<std::string> expected = {
      "/opt/bin/perf-launch", "-m", "llama", "-ng", "8", "shardbench.report_dir=/jobs/x"};
  EXPECT_EQ(slurm_job_spec(r, in).worker_argv, expected);
}

TEST(SlurmJobNaming, ExperimentNameAndJobFolder) {
  ResolvedConfig r = resolve_slurm("h100", 16);
  EXPECT_EQ(slurm_experiment_name(r), "pretrain_llama3_8b_bf16_gpus16_h100");
  const auto t = std::chrono::system_clock::from_time_t(1796229300);  // 2026-12-02T16:35:00Z
  r.args.log_dir = "/shared/runs";
  EXPECT_EQ(slurm_job_dir(r, t).string(),
            "/shared/runs/pretrain_llama3_8b_bf16_gpus16_h100_20261202T163500Z");
  r.args.log_dir.reset();
  EXPECT_EQ(slurm_job_dir(r, t).filename().string(),
            "pretrain_llama3_8b_bf16_gpus16_h100_20261202T163500Z");
  EXPECT_EQ(slurm_job_dir(r, t).parent_path().filename().string(), "slurm");
  EXPECT_TRUE(slurm_job_dir(r, t).is_absolute());
}

TEST(SlurmJobState, ParsesSbatchAndScontrolOutput) {
  EXPECT_EQ(parse_sbatch_job_id("42\n"), "42");
  EXPECT_EQ(parse_sbatch_job_id("1234;cluster-a\n"), "1234");
  EXPECT_THROW(parse_sbatch_job_id("sbatch: error: Batch job submission failed"),
               std::invalid_argument);
  EXPECT_THROW(parse_sbatch_job_id(""), std::invalid_argument);

  const auto done = parse_scontrol_job(
      "JobId=7 JobName=pretrain_x UserId=root(0) Priority=1 JobState=COMPLETED Reason=None "
      "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:09\n");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->state, "COMPLETED");
  EXPECT_TRUE(done->finished());
  EXPECT_EQ(done->exit_code, 0);

  const auto failed = parse_scontrol_job(
      "JobId=8 JobState=FAILED Reason=NonZeroExitCode DerivedExitCode=0:0 ExitCode=3:0");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->exit_code, 3);  // not DerivedExitCode's 0
  EXPECT_TRUE(failed->finished());

  const auto killed = parse_scontrol_job("JobId=9 JobState=CANCELLED ExitCode=0:15");
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->signal, 15);

  const auto running = parse_scontrol_job("JobId=9 JobState=RUNNING ExitCode=0:0");
  ASSERT_TRUE(running);
  EXPECT_FALSE(running->finished());
  EXPECT_FALSE(parse_scontrol_job("slurm_load_jobs error: Invalid job id specified"));
}

// The environment of an sbatch script's own step (batch step) and of one of its srun tasks, as
// Slurm 22.05 sets them.
Env batch_step_env() {
  return {{"ENVIRONMENT", "BATCH"},
          {"SLURM_JOB_ID", "17"},
          {"SLURM_JOB_NODELIST", "node-[1-2]"},
          {"SLURM_PROCID", "0"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", "0"},
          {"SLURM_NTASKS", "16"},
          {"SLURM_NTASKS_PER_NODE", "8"},
          {"SLURM_TASKS_PER_NODE", "8(x2)"}};
}

TEST(SlurmLaunchEnv, BatchStepIsNotARank) {
  const LaunchEnv env = detect_launch_env(batch_step_env());
  EXPECT_FALSE(env.is_worker);
  EXPECT_EQ(env.launcher, Launcher::kNone);
}

TEST(SlurmLaunchEnv, SrunTaskInsideTheBatchScriptIsARank) {
  Env vars = batch_step_env();
  vars["SLURM_STEP_ID"] = "0";
  vars["SLURM_PROCID"] = "11";
  vars["SLURM_LOCALID"] = "3";
  vars["SLURM_NODEID"] = "1";
  vars["MASTER_ADDR"] = "node-1";
  vars["MASTER_PORT"] = "20017";
  const LaunchEnv env = detect_launch_env(vars);
  EXPECT_TRUE(env.is_worker);
  EXPECT_EQ(env.launcher, Launcher::kSlurm);
  EXPECT_EQ(env.rank, 11);
  EXPECT_EQ(env.world_size, 16);
  EXPECT_EQ(env.local_rank, 3);
  EXPECT_EQ(env.local_world_size, 8);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "node-1");
  EXPECT_EQ(env.master_port, 20017);
  EXPECT_EQ(env.slurm_job_id, "17");
  EXPECT_EQ(env.slurm_nodelist, "node-[1-2]");
  // The script's MASTER_PORT rule and the workers' fallback agree.
  EXPECT_EQ(slurm_default_master_port(17), 20017);
}

}  // namespace
}  // namespace shardbench
