// shardbench.cpu_scheduling on the launcher side: the cores each rank gets, its OMP_NUM_THREADS,
// the config check's refusals, and a real fork + exec that comes out on the asked cores and
// policy (docs/cpu-scheduling.md).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "harness/config/errors.hpp"
#include "harness/launch/cpu_placement.hpp"
#include "harness/launch/worker_command.hpp"
#include "harness/launch/worker_process.hpp"
#include "tests/launch/test_helpers.hpp"

namespace shardbench {
namespace {

using Env = std::map<std::string, std::string>;
using launch_test::HasSubstr;

TEST(CpuScheduling, RanksGetEqualDisjointSlicesOfTheUsableCores) {
  const std::vector<int> usable = {0, 1, 2, 3, 4, 6, 7};  // core 5 not ours
  EXPECT_EQ(cpu_placement(CpuScheduling::kPinned, 0, 2, usable).cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(cpu_placement(CpuScheduling::kPinned, 1, 2, usable).cpus, (std::vector<int>{3, 4, 6}));
  EXPECT_EQ(cpu_placement(CpuScheduling::kPinned, 1, 2, usable).rr_priority, 0);
  const CpuPlacement rt = cpu_placement(CpuScheduling::kRealtime, 1, 7, usable);
  EXPECT_EQ(rt.cpus, (std::vector<int>{1}));
  EXPECT_EQ(rt.rr_priority, 1);
  EXPECT_TRUE(cpu_placement(CpuScheduling::kDefault, 0, 2, usable).cpus.empty());
  EXPECT_EQ(cpu_placement(CpuScheduling::kDefault, 0, 2, usable).rr_priority, 0);
}

TEST(CpuScheduling, CpuListTextIsTasksetsForm) {
  EXPECT_EQ(cpu_list_text({}), "");
  EXPECT_EQ(cpu_list_text({3}), "3");
  EXPECT_EQ(cpu_list_text({0, 1}), "0-1");
  EXPECT_EQ(cpu_list_text({0, 2, 4, 5, 6, 7, 9}), "0,2,4-7,9");
}

LocalLaunchOptions cpu_launch(int nproc, CpuScheduling mode, std::vector<int> usable) {
  LocalLaunchOptions options;
  options.nproc = nproc;
  options.worker_argv = {"/bin/true"};
  options.cpu_scheduling = mode;
  options.usable_cpus = std::move(usable);
  return options;
}

TEST(CpuScheduling, OmpThreadsFollowTorchrunUnlessPinnedAndTheUserWins) {
  // Several ranks, no placement: one intra-op thread each, as torchrun sets.
  EXPECT_EQ(worker_environment({}, cpu_launch(2, CpuScheduling::kDefault, {0, 1}), 1, 1, 3)
                .at("OMP_NUM_THREADS"),
            "1");
  // One rank: the machine is its own, ATen's default stays.
  EXPECT_FALSE(worker_environment({}, cpu_launch(1, CpuScheduling::kDefault, {0, 1}), 0, 1, 3)
                   .count("OMP_NUM_THREADS"));
  // Pinned: as many threads as the rank's cores.
  EXPECT_EQ(worker_environment({}, cpu_launch(2, CpuScheduling::kPinned, {0, 1, 2, 3, 4, 5}), 1,
                               1, 3)
                .at("OMP_NUM_THREADS"),
            "3");
  EXPECT_EQ(worker_environment({}, cpu_launch(1, CpuScheduling::kRealtime, {0, 1}), 0, 1, 3)
                .at("OMP_NUM_THREADS"),
            "2");
  // The shell's value or an env.OMP_NUM_THREADS override is kept.
  EXPECT_EQ(worker_environment({{"OMP_NUM_THREADS", "7"}},
                               cpu_launch(2, CpuScheduling::kPinned, {0, 1}), 0, 1, 3)
                .at("OMP_NUM_THREADS"),
            "7");
  LocalLaunchOptions with_env = cpu_launch(2, CpuScheduling::kDefault, {0, 1});
  with_env.env = {{"OMP_NUM_THREADS", "4"}};
  EXPECT_EQ(worker_environment({}, with_env, 0, 1, 3).at("OMP_NUM_THREADS"), "4");
}

ConfigContainer cpu_config(const std::string& mode) {
  ConfigContainer c;
  c.shardbench.cpu_scheduling = mode;
  return c;
}

std::string refusal(const ConfigContainer& c, const std::string& gpu, Launcher launcher,
                    int ranks, const std::vector<int>& usable, bool realtime_allowed) {
  try {
    check_cpu_scheduling(c, gpu, launcher, ranks, usable, realtime_allowed);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(CpuScheduling, ConfigCheckNamesFieldValueAndAccepted) {
  EXPECT_EQ(refusal(cpu_config("default"), "h200", Launcher::kTorchrun, 8, {0}, false), "");
  EXPECT_EQ(refusal(cpu_config("pinned"), "cpu", Launcher::kNone, 2, {0, 1}, false), "");
  EXPECT_EQ(refusal(cpu_config("realtime"), "cpu", Launcher::kNone, 2, {0, 1}, true), "");
  ConfigContainer device_cpu = cpu_config("pinned");
  device_cpu.shardbench.device = "cpu";
  EXPECT_EQ(refusal(device_cpu, "h200", Launcher::kNone, 2, {0, 1}, false), "");
  EXPECT_EQ(refusal(cpu_config("bogus"), "cpu", Launcher::kNone, 2, {0, 1}, true),
            "shardbench.cpu_scheduling=bogus is not a scheduling mode; accepted: default, "
            "pinned, realtime");
  EXPECT_TRUE(HasSubstr(refusal(cpu_config("pinned"), "h200", Launcher::kNone, 2, {0, 1}, true),
                        "shardbench.cpu_scheduling=pinned applies to CPU runs only"));
  EXPECT_TRUE(HasSubstr(refusal(cpu_config("pinned"), "cpu", Launcher::kTorchrun, 2, {0, 1}, true),
                        "accepted: default under torchrun"));
  EXPECT_TRUE(HasSubstr(refusal(cpu_config("realtime"), "cpu", Launcher::kSlurm, 2, {0, 1}, true),
                        "accepted: default under slurm"));
  EXPECT_EQ(refusal(cpu_config("pinned"), "cpu", Launcher::kNone, 4, {0, 1}, true),
            "shardbench.cpu_scheduling=pinned needs a core per rank: 4 ranks, 2 usable core(s) "
            "(0-1); accepted: default, or -ng <= 2");
  EXPECT_EQ(refusal(cpu_config("realtime"), "cpu", Launcher::kNone, 2, {0, 1}, false),
            "shardbench.cpu_scheduling=realtime needs permission to set SCHED_RR "
            "(CAP_SYS_NICE, or `ulimit -r` >= 1), which this process lacks; accepted: default, "
            "pinned");
  // A worker perf-launch started checks neither (it runs on one slice, under the policy).
  EXPECT_EQ(refusal(cpu_config("realtime"), "cpu", Launcher::kPerfLaunch, 2, {1}, false), "");
}

// Spawns /bin/sh through spawn_worker (the launcher's fork + exec) with `placement` and returns
// what the child saw: its Cpus_allowed_list and `chrt -p` line.
std::string placed_child_view(const CpuPlacement& placement) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("shardbench_cpu_sched_" + std::to_string(::getpid()) + ".txt");
  WorkerSpawn spawn;
  spawn.executable = "/bin/sh";
  spawn.argv = {"sh", "-c",
                "grep Cpus_allowed_list /proc/self/status > '" + out.string() +
                    "'; chrt -p $$ >> '" + out.string() + "'"};
  spawn.env = {"PATH=/usr/bin:/bin"};
  spawn.placement = placement;
  const pid_t pid = spawn_worker(spawn);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(out);
  return text.str();
}

TEST(CpuScheduling, SpawnedWorkerRunsOnItsCoresUnderItsPolicy) {
  const std::vector<int> usable = usable_cpus();
  ASSERT_FALSE(usable.empty());
  const std::string last = std::to_string(usable.back());
  const CpuPlacement pinned = cpu_placement(CpuScheduling::kPinned, static_cast<int>(usable.size()) - 1,
                                            static_cast<int>(usable.size()), usable);
  const std::string seen = placed_child_view(pinned);
  EXPECT_TRUE(HasSubstr(seen, "Cpus_allowed_list:\t" + last + "\n")) << seen;
  EXPECT_TRUE(HasSubstr(seen, "SCHED_OTHER")) << seen;
  // Default: the child keeps the launcher's affinity and policy.
  const std::string unplaced = placed_child_view(CpuPlacement{});
  EXPECT_TRUE(HasSubstr(unplaced, "Cpus_allowed_list:\t" + cpu_list_text(usable) + "\n"))
      << unplaced;
  if (!realtime_scheduling_allowed()) {
    GTEST_SKIP() << "this process may not set SCHED_RR; the refusal is tested above";
  }
  const std::string rt =
      placed_child_view(cpu_placement(CpuScheduling::kRealtime, 0, 1, usable));
  EXPECT_TRUE(HasSubstr(rt, "SCHED_RR")) << rt;
  EXPECT_TRUE(HasSubstr(rt, "priority: 1")) << rt;
}

}  // namespace
}  // namespace shardbench
