// Launcher detection: perf-launch, torchrun and Slurm srun variables, Slurm host lists, and the
// errors for values that cannot be right.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "harness/launch/launch_env.hpp"
#include "harness/launch/slurm_hostlist.hpp"
#include "tests/launch/test_helpers.hpp"

namespace shardbench {
namespace {

using Env = std::map<std::string, std::string>;
using Hosts = std::vector<std::string>;
using launch_test::error_of;
using launch_test::HasSubstr;

Env torchrun_env() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"GROUP_RANK", "1"},
          {"MASTER_ADDR", "node-a"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "none"}};
}

Env slurm_env() {
  return {{"SLURM_PROCID", "6"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "2"},
          {"SLURM_NODEID", "1"},
          {"SLURM_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_JOB_ID", "123456"},
          {"SLURM_JOB_NODELIST", "gpu-[07-08]"}};
}

TEST(LaunchEnvTest, PlainShellIsNotAWorker) {
  const LaunchEnv env = detect_launch_env(Env{{"HOME", "/root"}, {"PATH", "/bin"}});
  EXPECT_FALSE(env.is_worker);
  EXPECT_EQ(env.launcher, Launcher::kNone);
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.heartbeat_fd, -1);
}

TEST(LaunchEnvTest, PerfLaunchWorker) {
  Env vars = torchrun_env();
  vars.erase("TORCHELASTIC_RUN_ID");
  vars["SHARDBENCH_LAUNCHER"] = "perf-launch";
  vars["SHARDBENCH_HEARTBEAT_FD"] = "7";
  vars["SLURM_PROCID"] = "0";  // perf-launch started inside an sbatch script
  const LaunchEnv env = detect_launch_env(vars);
  EXPECT_TRUE(env.is_worker);
  EXPECT_EQ(env.launcher, Launcher::kPerfLaunch);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "node-a");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.heartbeat_fd, 7);
  EXPECT_TRUE(env.slurm_job_id.empty());
}

TEST(LaunchEnvTest, PerfLaunchRejectsOtherLauncherNamesAndBadFd) {
  Env vars = torchrun_env();
  vars["SHARDBENCH_LAUNCHER"] = "mpirun";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }),
                        "SHARDBENCH_LAUNCHER=\"mpirun\" is invalid; accepted: \"perf-launch\""));
  vars["SHARDBENCH_LAUNCHER"] = "perf-launch";
  vars["SHARDBENCH_HEARTBEAT_FD"] = "-3";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }),
                        "SHARDBENCH_HEARTBEAT_FD=\"-3\" is invalid"));
}

TEST(LaunchEnvTest, TorchrunWorkerWinsOverSlurmVariables) {
  Env vars = torchrun_env();
  vars.merge(slurm_env());  // torchrun inside an sbatch allocation
  const LaunchEnv env = detect_launch_env(vars);
  EXPECT_TRUE(env.is_worker);
  EXPECT_EQ(env.launcher, Launcher::kTorchrun);
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.heartbeat_fd, -1);
}

TEST(LaunchEnvTest, TorchrunGroupRankDefaultsToZero) {
  Env vars = torchrun_env();
  vars.erase("GROUP_RANK");
  EXPECT_EQ(detect_launch_env(vars).node_rank, 0);
}

TEST(LaunchEnvTest, TorchrunBadValuesNameVariableValueAndAccepted) {
  Env vars = torchrun_env();
  vars["RANK"] = "8";
  EXPECT_EQ(error_of([&] { detect_launch_env(vars); }),
            "torchrun launch environment: RANK=\"8\" is invalid; accepted: an integer in [0, 8) "
            "(WORLD_SIZE=8)");

  vars = torchrun_env();
  vars["WORLD_SIZE"] = "eight";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }),
                        "WORLD_SIZE=\"eight\" is invalid; accepted: an integer >= 1"));

  vars = torchrun_env();
  vars["LOCAL_RANK"] = "1x";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }), "LOCAL_RANK=\"1x\""));

  vars = torchrun_env();
  vars["LOCAL_WORLD_SIZE"] = "16";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }),
                        "LOCAL_WORLD_SIZE=\"16\" is invalid; accepted: an integer in [1, "
                        "WORLD_SIZE=8]"));

  vars = torchrun_env();
  vars.erase("MASTER_PORT");
  EXPECT_EQ(error_of([&] { detect_launch_env(vars); }),
            "torchrun launch environment: MASTER_PORT is not set; accepted: a TCP port in [1, "
            "65535]");

  vars = torchrun_env();
  vars["MASTER_PORT"] = "70000";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }), "MASTER_PORT=\"70000\""));

  vars = torchrun_env();
  vars["RANK"] = "";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }), "RANK=\"\" is invalid"));
}

TEST(LaunchEnvTest, SlurmTaskFromTasksPerNode) {
  const LaunchEnv env = detect_launch_env(slurm_env());
  EXPECT_TRUE(env.is_worker);
  EXPECT_EQ(env.launcher, Launcher::kSlurm);
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.master_addr, "gpu-07");  // first host of the allocation runs task 0
  EXPECT_EQ(env.master_port, slurm_default_master_port(123456));
  EXPECT_EQ(env.slurm_job_id, "123456");
  EXPECT_EQ(env.slurm_nodelist, "gpu-[07-08]");
  EXPECT_EQ(env.heartbeat_fd, -1);
}

TEST(LaunchEnvTest, SlurmUnevenTasksPerNodeAndExplicitMaster) {
  Env vars = slurm_env();
  vars["SLURM_NTASKS"] = "7";
  vars["SLURM_TASKS_PER_NODE"] = "4,3";
  vars["SLURM_PROCID"] = "5";
  vars["SLURM_LOCALID"] = "1";
  vars["MASTER_ADDR"] = "10.0.0.1";
  vars["MASTER_PORT"] = "12345";
  const LaunchEnv env = detect_launch_env(vars);
  EXPECT_EQ(env.local_world_size, 3);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 12345);
}

TEST(LaunchEnvTest, SlurmNtasksPerNodeWins) {
  Env vars = slurm_env();
  vars["SLURM_NTASKS_PER_NODE"] = "4";
  vars["SLURM_TASKS_PER_NODE"] = "garbage";
  EXPECT_EQ(detect_launch_env(vars).local_world_size, 4);
}

TEST(LaunchEnvTest, SlurmDefaultPortIsStablePerJobAndBelowEphemeralRange) {
  EXPECT_EQ(slurm_default_master_port(123456), slurm_default_master_port(123456));
  EXPECT_NE(slurm_default_master_port(123456), slurm_default_master_port(123457));
  for (long long job : {0LL, 1LL, 9999LL, 123456789LL}) {
    EXPECT_GE(slurm_default_master_port(job), 20000);
    EXPECT_LT(slurm_default_master_port(job), 30000);
  }
}

TEST(LaunchEnvTest, SlurmBadValues) {
  Env vars = slurm_env();
  vars["SLURM_PROCID"] = "8";
  EXPECT_EQ(error_of([&] { detect_launch_env(vars); }),
            "slurm launch environment: SLURM_PROCID=\"8\" is invalid; accepted: an integer in [0, "
            "8) (SLURM_NTASKS=8)");

  vars = slurm_env();
  vars["SLURM_LOCALID"] = "4";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }), "SLURM_LOCALID=\"4\""));

  vars = slurm_env();
  vars["SLURM_NODEID"] = "2";  // "4(x2)" lists two nodes
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }), "SLURM_NODEID=\"2\""));

  vars = slurm_env();
  vars["SLURM_TASKS_PER_NODE"] = "4(2)";
  EXPECT_TRUE(
      HasSubstr(error_of([&] { detect_launch_env(vars); }), "SLURM_TASKS_PER_NODE=\"4(2)\""));

  vars = slurm_env();
  vars.erase("SLURM_JOB_ID");
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }),
                        "SLURM_JOBID is not set; accepted: a numeric job id (or set MASTER_PORT)"));

  vars = slurm_env();
  vars["SLURM_JOB_NODELIST"] = "gpu-[07-";
  EXPECT_TRUE(HasSubstr(error_of([&] { detect_launch_env(vars); }),
                        "SLURM_JOB_NODELIST: Slurm host list \"gpu-[07-\""));

  vars = slurm_env();
  vars.erase("SLURM_JOB_NODELIST");
  EXPECT_TRUE(
      HasSubstr(error_of([&] { detect_launch_env(vars); }), "SLURM_JOB_NODELIST is not set"));
}

TEST(LaunchHostlistTest, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(expand_slurm_hostlist("gpu-[01-03,07],cpu9"),
            (Hosts{"gpu-01", "gpu-02", "gpu-03", "gpu-07", "cpu9"}));
  EXPECT_EQ(expand_slurm_hostlist("node7"), (Hosts{"node7"}));
  EXPECT_EQ(expand_slurm_hostlist("n[8-10]"), (Hosts{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_hostlist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]n[1,3]-ib"),
            (Hosts{"r1n1-ib", "r1n3-ib", "r2n1-ib", "r2n3-ib"}));
  EXPECT_EQ(expand_slurm_hostlist("a[1],b,c[2-3]"), (Hosts{"a1", "b", "c2", "c3"}));
}

TEST(LaunchHostlistTest, RejectsMalformedLists) {
  for (const char* bad : {"", "gpu-[01-03", "gpu-01]", "gpu-[03-01]", "gpu-[a-b]", "gpu-[]", "a,,b",
                          "gpu-[1-[2]]", "a b", "n[0-99999999]"}) {
    EXPECT_TRUE(HasSubstr(error_of([&] { expand_slurm_hostlist(bad); }),
                          "Slurm host list \"" + std::string(bad) + "\""))
        << bad;
  }
  EXPECT_TRUE(HasSubstr(error_of([] { expand_slurm_hostlist("gpu-[03-01]"); }),
                        "empty range \"03-01\" at position 5; accepted:"));
}

TEST(LaunchHostlistTest, ExpandsTasksPerNode) {
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("8"), (std::vector<int>{8}));
  for (const char* bad : {"", "0", "2(x0)", "2(3)", "x", "2,", "2(x3"}) {
    EXPECT_TRUE(HasSubstr(error_of([&] { expand_slurm_tasks_per_node(bad); }),
                          "SLURM_TASKS_PER_NODE=\"" + std::string(bad) + "\""))
        << bad;
  }
}

}  // namespace
}  // namespace shardbench
