// The sbatch scripts perf-launch --executor slurm writes (and prints first under --dryrun), pinned
// for the job shapes users run: one 8-GPU node, four 8-GPU nodes with the user's environment,
// srun arguments, extra sbatch options and nsys on two ranks, 2 GPUs of a 4-GPU node, CPU ranks.
// A change here is a change users see in every job they submit: update the text deliberately.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "harness/config/resolve.hpp"
#include "harness/slurm/job_spec.hpp"
#include "harness/slurm/sbatch_script.hpp"

namespace shardbench {
namespace {

constexpr const char* kPerfLaunch = "/opt/shardbench/bin/perf-launch";
constexpr const char* kJobDir = "/shared/results/slurm/job";

ValidationContext clean_env() {
  ValidationContext ctx;
  ctx.getenv = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  return ctx;
}

std::string script_for(const std::vector<std::string>& args) {
  const ResolvedConfig r = resolve_from_args(args, clean_env());
  check_slurm_launch(r);
  SlurmLaunchInputs in;
  in.perf_launch_path = kPerfLaunch;
  in.args = args;
  in.job_dir = kJobDir;
  return render_sbatch_script(slurm_job_spec(r, in));
}

// -d/--dryrun prints this script; the srun tasks run without it.
TEST(SlurmScriptGolden, OneNodeOfEightH100) {
  const std::string expected = R"SCRIPT(#!/bin/bash
# shardbench pretrain_llama3_8b_bf16_gpus8_h100: 1 node x 8 tasks, one rank per GPU.
# Written by perf-launch --executor slurm; the job folder keeps it, the log and the report.
#SBATCH --job-name=pretrain_llama3_8b_bf16_gpus8_h100
#SBATCH --account=acct
#SBATCH --partition=batch
#SBATCH --time=00:30:00
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --output=/shared/results/slurm/job/log_%j.out
set -euo pipefail

export SHARDBENCH_JOB_DIR=/shared/results/slurm/job
# Left over from the submitting shell, these would outrank Slurm's rank variables.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID SHARDBENCH_LAUNCHER SHARDBENCH_HEARTBEAT_FD

# Recipe environment; a value the submitting shell exports wins (as in Megatron-Bridge's bootstrap.py).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS-32}"
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF-expandable_segments:True}"
export TORCH_NCCL_HIGH_PRIORITY="${TORCH_NCCL_HIGH_PRIORITY-1}"

# Rendezvous: srun places task 0 on the first node of the allocation.
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# Where the job ran and on what, for the report (it keeps SHARDBENCH_* variables).
export SHARDBENCH_SLURM_NODELIST="$SLURM_JOB_NODELIST"
export SHARDBENCH_SLURM_NODE_GPUS="$(srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'echo "$SLURMD_NODENAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd /)"' | sort | paste -sd ';')"

# One task per rank; each reads its rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.
srun --nodes=1 --ntasks-per-node=8 --kill-on-bad-exit=1 \
  bash -c 'exec numactl --cpunodebind=$((SLURM_LOCALID / 4)) "$@"' shardbench-task \
  /opt/shardbench/bin/perf-launch -m llama -mr llama3_8b -ng 8 -g h100 -a acct -p batch --executor slurm shardbench.report_dir=/shared/results/slurm/job
)SCRIPT";
  EXPECT_EQ(script_for({"-m", "llama", "-mr", "llama3_8b", "-ng", "8", "-g", "h100", "-a", "acct",
                        "-p", "batch", "--executor", "slurm", "-d"}),
            expected);
}

// nsys wraps ranks 0 and 8 only, one report per rank named as NsysPlugin names them.
TEST(SlurmScriptGolden, FourNodesOfEightH100WithUserSettingsAndNsys) {
  const std::string expected = R"SCRIPT(#!/bin/bash
# shardbench pretrain_llama3_70b_bf16_gpus32_h100: 4 nodes x 8 tasks, one rank per GPU.
# Written by perf-launch --executor slurm; the job folder keeps it, the log and the report.
#SBATCH --job-name=pretrain_llama3_70b_bf16_gpus32_h100
#SBATCH --account=perf
#SBATCH --partition=batch
#SBATCH --time=01:00:00
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --output=/shared/results/slurm/job/log_%j.out
#SBATCH --reservation=perf
#SBATCH --exclusive
set -euo pipefail

export SHARDBENCH_JOB_DIR=/shared/results/slurm/job
# Left over from the submitting shell, these would outrank Slurm's rank variables.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID SHARDBENCH_LAUNCHER SHARDBENCH_HEARTBEAT_FD

# Recipe environment; a value the submitting shell exports wins (as in Megatron-Bridge's bootstrap.py).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS-32}"
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF-expandable_segments:True}"
export TORCH_NCCL_HIGH_PRIORITY="${TORCH_NCCL_HIGH_PRIORITY-1}"

# -E/--env and -ce/--custom_env_vars.
export NCCL_DEBUG=INFO
export NAME='two words'

# Rendezvous: srun places task 0 on the first node of the allocation.
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# Where the job ran and on what, for the report (it keeps SHARDBENCH_* variables).
export SHARDBENCH_SLURM_NODELIST="$SLURM_JOB_NODELIST"
export SHARDBENCH_SLURM_NODE_GPUS="$(srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'echo "$SLURMD_NODENAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd /)"' | sort | paste -sd ';')"
mkdir -p "$SHARDBENCH_JOB_DIR/nsys"

# One task per rank; each reads its rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.
srun --nodes=4 --ntasks-per-node=8 --kill-on-bad-exit=1 --mpi=pmix \
  bash -c 'case $SLURM_PROCID in 0|8) set -- nsys profile -s none -t cuda-sw,nvtx -o "$SHARDBENCH_JOB_DIR/nsys/profile_%p_%q{SLURM_JOB_ID}_node%q{SLURM_NODEID}_rank%q{SLURM_PROCID}" --force-overwrite true --capture-range=cudaProfilerApi --capture-range-end=stop "$@" ;; esac; exec numactl --cpunodebind=$((SLURM_LOCALID / 4)) "$@"' shardbench-task \
  /opt/shardbench/bin/perf-launch -m llama -mr llama3_70b -ng 32 -g h100 --use_megatron_fsdp true -a perf -p batch -t 01:00:00 --executor slurm -E NCCL_DEBUG=INFO -E 'NAME=two words' -cs --mpi=pmix --additional_slurm_params 'reservation=perf;exclusive' -en --profiling_ranks 0,8 shardbench.report_dir=/shared/results/slurm/job
)SCRIPT";
  EXPECT_EQ(script_for({"-m",
                        "llama",
                        "-mr",
                        "llama3_70b",
                        "-ng",
                        "32",
                        "-g",
                        "h100",
                        "--use_megatron_fsdp",
                        "true",
                        "-a",
                        "perf",
                        "-p",
                        "batch",
                        "-t",
                        "01:00:00",
                        "--executor",
                        "slurm",
                        "-E",
                        "NCCL_DEBUG=INFO",
                        "-E",
                        "NAME=two words",
                        "-cs",
                        "--mpi=pmix",
                        "--additional_slurm_params",
                        "reservation=perf;exclusive",
                        "-en",
                        "--profiling_ranks",
                        "0,8"}),
            expected);
}

// gb200 nodes have 4 GPUs; a 2-GPU run takes one node and two tasks, two per NUMA domain.
TEST(SlurmScriptGolden, TwoGpusOfAFourGpuNode) {
  const std::string expected = R"SCRIPT(#!/bin/bash
# shardbench pretrain_llama3_8b_bf16_gpus2_gb200: 1 node x 2 tasks, one rank per GPU.
# Written by perf-launch --executor slurm; the job folder keeps it, the log and the report.
#SBATCH --job-name=pretrain_llama3_8b_bf16_gpus2_gb200
#SBATCH --account=acct
#SBATCH --time=00:30:00
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=2
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --output=/shared/results/slurm/job/log_%j.out
set -euo pipefail

export SHARDBENCH_JOB_DIR=/shared/results/slurm/job
# Left over from the submitting shell, these would outrank Slurm's rank variables.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID SHARDBENCH_LAUNCHER SHARDBENCH_HEARTBEAT_FD

# Recipe environment; a value the submitting shell exports wins (as in Megatron-Bridge's bootstrap.py).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS-32}"
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF-expandable_segments:True}"
export TORCH_NCCL_HIGH_PRIORITY="${TORCH_NCCL_HIGH_PRIORITY-1}"

# Rendezvous: srun places task 0 on the first node of the allocation.
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# Where the job ran and on what, for the report (it keeps SHARDBENCH_* variables).
export SHARDBENCH_SLURM_NODELIST="$SLURM_JOB_NODELIST"
export SHARDBENCH_SLURM_NODE_GPUS="$(srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'echo "$SLURMD_NODENAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd /)"' | sort | paste -sd ';')"

# One task per rank; each reads its rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.
srun --nodes=1 --ntasks-per-node=2 --kill-on-bad-exit=1 \
  bash -c 'exec numactl --cpunodebind=$((SLURM_LOCALID / 2)) "$@"' shardbench-task \
  /opt/shardbench/bin/perf-launch -m llama -mr llama3_8b -ng 2 -g gb200 -a acct --executor slurm shardbench.report_dir=/shared/results/slurm/job
)SCRIPT";
  EXPECT_EQ(script_for({"-m", "llama", "-mr", "llama3_8b", "-ng", "2", "-g", "gb200", "-a", "acct",
                        "--executor", "slurm"}),
            expected);
}

// -g cpu: one gloo rank per task, no GPUs requested, no numactl (what tests/slurm runs).
TEST(SlurmScriptGolden, CpuRanksOfTheTinyRecipe) {
  const std::string expected = R"SCRIPT(#!/bin/bash
# shardbench pretrain_llama3_tiny_cpu_bf16_gpus2_cpu: 1 node x 2 tasks, one rank per task.
# Written by perf-launch --executor slurm; the job folder keeps it, the log and the report.
#SBATCH --job-name=pretrain_llama3_tiny_cpu_bf16_gpus2_cpu
#SBATCH --account=test
#SBATCH --time=00:30:00
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --output=/shared/results/slurm/job/log_%j.out
set -euo pipefail

export SHARDBENCH_JOB_DIR=/shared/results/slurm/job
# Left over from the submitting shell, these would outrank Slurm's rank variables.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID SHARDBENCH_LAUNCHER SHARDBENCH_HEARTBEAT_FD

# Recipe environment; a value the submitting shell exports wins (as in Megatron-Bridge's bootstrap.py).
export TORCH_NCCL_HIGH_PRIORITY="${TORCH_NCCL_HIGH_PRIORITY-1}"

# Rendezvous: srun places task 0 on the first node of the allocation.
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# Where the job ran and on what, for the report (it keeps SHARDBENCH_* variables).
export SHARDBENCH_SLURM_NODELIST="$SLURM_JOB_NODELIST"
export SHARDBENCH_SLURM_NODE_GPUS="$(srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'echo "$SLURMD_NODENAME=cpu"' | sort | paste -sd ';')"

# One task per rank; each reads its rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.
srun --nodes=1 --ntasks-per-node=2 --kill-on-bad-exit=1 \
  /opt/shardbench/bin/perf-launch -m llama -mr llama3_tiny_cpu -ng 2 -g cpu -a test --executor slurm shardbench.report_dir=/shared/results/slurm/job
)SCRIPT";
  EXPECT_EQ(script_for({"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", "2", "-g", "cpu", "-a",
                        "test", "--executor", "slurm"}),
            expected);
}

// Megatron-Bridge's 405B FSDP row on 16 and 32 H100 nodes: TP 2 comes from the recipe (no -tp on
// the srun line), the FSDP rows' 32 connections and no expandable segments.
TEST(SlurmScriptGolden, Llama31_405bTensorParallelFsdpOn128And256H100) {
  for (const char* gpus : {"128", "256"}) {
    const std::string nodes = std::string(gpus) == "128" ? "16" : "32";
    std::string expected = R"SCRIPT(#!/bin/bash
# shardbench pretrain_llama31_405b_bf16_gpus@GPUS@_h100: @NODES@ nodes x 8 tasks, one rank per GPU.
# Written by perf-launch --executor slurm; the job folder keeps it, the log and the report.
#SBATCH --job-name=pretrain_llama31_405b_bf16_gpus@GPUS@_h100
#SBATCH --account=acct
#SBATCH --partition=batch
#SBATCH --time=00:30:00
#SBATCH --nodes=@NODES@
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --output=/shared/results/slurm/job/log_%j.out
set -euo pipefail

export SHARDBENCH_JOB_DIR=/shared/results/slurm/job
# Left over from the submitting shell, these would outrank Slurm's rank variables.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID SHARDBENCH_LAUNCHER SHARDBENCH_HEARTBEAT_FD

# Recipe environment; a value the submitting shell exports wins (as in Megatron-Bridge's bootstrap.py).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS-32}"
export TORCH_NCCL_HIGH_PRIORITY="${TORCH_NCCL_HIGH_PRIORITY-1}"

# Rendezvous: srun places task 0 on the first node of the allocation.
export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))

# Where the job ran and on what, for the report (it keeps SHARDBENCH_* variables).
export SHARDBENCH_SLURM_NODELIST="$SLURM_JOB_NODELIST"
export SHARDBENCH_SLURM_NODE_GPUS="$(srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'echo "$SLURMD_NODENAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort -u | paste -sd /)"' | sort | paste -sd ';')"

# One task per rank; each reads its rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID.
srun --nodes=@NODES@ --ntasks-per-node=8 --kill-on-bad-exit=1 \
  bash -c 'exec numactl --cpunodebind=$((SLURM_LOCALID / 4)) "$@"' shardbench-task \
  /opt/shardbench/bin/perf-launch -m llama -mr llama31_405b -ng @GPUS@ -g h100 -a acct -p batch --use_megatron_fsdp true --executor slurm shardbench.report_dir=/shared/results/slurm/job
)SCRIPT";
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"@GPUS@", gpus},
                                     {"@NODES@", nodes}}) {
      for (size_t at = expected.find(key); at != std::string::npos; at = expected.find(key)) {
        expected.replace(at, key.size(), value);
      }
    }
    EXPECT_EQ(script_for({"-m", "llama", "-mr", "llama31_405b", "-ng", gpus, "-g", "h100", "-a",
                          "acct", "-p", "batch", "--use_megatron_fsdp", "true", "--executor",
                          "slurm", "-d"}),
              expected);
  }
}

TEST(SlurmScriptRender, EnvironmentQuoting) {
  SlurmJobSpec spec;
  spec.job_name = "j";
  spec.account = "a";
  spec.time_limit = "10";
  spec.job_dir = "/jobs/with space";
  spec.node_probe = "cpu";
  spec.env_defaults = {{"SIMPLE", "expandable_segments:True"}, {"SPACED", "a b}c"}};
  spec.env_explicit = {{"MASTER_PORT", "29500"}, {"QUOTE", "it's"}};
  spec.worker_argv = {"/bin/perf-launch", "-E", "X=a b"};
  const std::string script = render_sbatch_script(spec);
  auto has = [&](const std::string& line) { return script.find(line) != std::string::npos; };
  EXPECT_TRUE(has("export SHARDBENCH_JOB_DIR='/jobs/with space'\n"));
  // Recipe values yield to the submitting shell's; quoted ones cannot go inside ${NAME-...}.
  EXPECT_TRUE(has("export SIMPLE=\"${SIMPLE-expandable_segments:True}\"\n"));
  EXPECT_TRUE(has("[ -n \"${SPACED+set}\" ] || export SPACED='a b}c'\n"));
  EXPECT_TRUE(has("export QUOTE='it'\\''s'\n"));
  // An explicit MASTER_PORT replaces the derived one; MASTER_ADDR is still the first node.
  EXPECT_TRUE(has("export MASTER_PORT=29500\n"));
  EXPECT_FALSE(has("SLURM_JOB_ID % 10000"));
  EXPECT_TRUE(has("export MASTER_ADDR=\"$(scontrol show hostnames"));
  EXPECT_TRUE(has("  /bin/perf-launch -E 'X=a b'\n"));
}

TEST(SlurmScriptRender, ShellQuote) {
  EXPECT_EQ(shell_quote("shardbench.report_dir=/a/b"), "shardbench.report_dir=/a/b");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a;b"), "'a;b'");
  EXPECT_EQ(shell_quote("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

}  // namespace
}  // namespace shardbench
