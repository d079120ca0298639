// The parallel layout of a run: how its ranks are split into tensor-, context-, expert-, data-
// and pipeline-parallel groups, and for hybrid sharding (HSDP) how the data-parallel ranks are
// split into distributed-optimizer instances. One description, from which every process group
// is built and which the report records (docs/parallel-layout.md).
//
// Rank order follows Megatron-LM's RankGenerator (megatron/core/parallel_state.py): with the
// default order "tp-cp-ep-dp-pp" the tensor-parallel rank varies fastest, then context, data
// and pipeline. Expert parallelism shares its ranks with data parallelism and does not change
// the dense groups; the dense groups are built from the order without "ep". Torch-free: the
// launcher, the dry run and the report use it as well as the engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardbench {

struct ParallelLayout {
  int world = 1;
  int tp = 1;
  int cp = 1;
  int ep = 1;
  int pp = 1;
  int dp = 1;  // world / (tp * cp * pp)
  // ddp.num_distributed_optimizer_instances: the dp x cp ranks of one data-parallel group are
  // cut into this many consecutive instances; each shards inside itself and the instances
  // replicate one another (HSDP). 1: one instance, the whole group.
  int dp_instances = 1;
  // ddp.outer_dp_sharding_strategy across the instances: "no_shard" (they replicate one
  // another) or "optim" (HFSDP: the optimizer state is sharded across them too). Recorded, not
  // checked by make(): validation owns its rules (check_hsdp).
  std::string outer_dp_sharding_strategy = "no_shard";
  std::string order = "tp-cp-ep-dp-pp";

  // Checks the sizes and the order and derives dp. Throws std::invalid_argument naming the
  // field, the value and what is accepted.
  static ParallelLayout make(int world, int tp, int cp, int ep, int pp, int dp_instances = 1,
                             const std::string& order = "tp-cp-ep-dp-pp");

  // Every group of the given kind, each a list of global ranks in group-rank order. `kind` is a
  // '-'-joined set of "tp", "cp", "dp", "pp" (any order: "dp-cp" and "cp-dp" are the same
  // group), as Megatron's get_ranks takes it.
  std::vector<std::vector<int>> groups(const std::string& kind) const;
  // The group of `kind` that holds `rank`.
  std::vector<int> group_of(const std::string& kind, int rank) const;

  // HSDP: the instance groups (consecutive slices of each dp-cp group, where the optimizer and,
  // under Megatron FSDP, the weights are sharded) and the cross-instance groups (the ranks at
  // the same position of every instance of one dp-cp group, across which they are replicated).
  // With one instance the instance groups are the dp-cp groups and each cross-instance group is
  // a single rank.
  std::vector<std::vector<int>> instance_groups() const;
  std::vector<std::vector<int>> cross_instance_groups() const;
  // The instance group and the cross-instance group that hold `rank`.
  std::vector<int> instance_group_of(int rank) const;
  std::vector<int> cross_instance_group_of(int rank) const;

  // Expert parallelism, as Megatron's expert RankGenerator lays it out (docs/moe.md): the same
  // order without cp, expert tensor parallelism equal to tp, and the expert-data-parallel size
  // world / (tp x ep x pp). `kind` is "ep" (ranks holding different experts) or "edp" (ranks
  // holding the same experts, over which their parameters are reduced and sharded). With ep 1
  // the edp groups are the dp-cp groups.
  int expert_dp() const { return world / (tp * ep * pp); }
  std::vector<std::vector<int>> expert_groups(const std::string& kind) const;
  std::vector<int> expert_group_of(const std::string& kind, int rank) const;
  // HSDP with experts: each edp group cut into dp_instances consecutive instances, and the
  // ranks at the same position of every instance (Megatron splits expert DP like dense DP).
  std::vector<int> expert_instance_group_of(int rank) const;
  std::vector<int> expert_cross_instance_group_of(int rank) const;
  // "tp2 cp1 ep1 dp4 pp1 instances2 (tp-cp-ep-dp-pp)": what a report or an error prints.
  std::string describe() const;

 private:
  // The one of `groups` that holds `rank`; throws std::invalid_argument for a rank outside the
  // world.
  std::vector<int> containing(const std::vector<std::vector<int>>& groups, int rank) const;
};

// Context parallelism's load-balanced split (Megatron's
// _get_batch_on_this_cp_rank_per_sequence_balancing; docs/context-parallel.md): the sequence is cut
// into 2 x cp equal chunks and context-parallel rank r keeps chunks r and 2 x cp - 1 - r, in that
// order, so that every rank's causal attention work is the same. Throws std::invalid_argument for
// cp < 1 or a rank outside 0..cp-1.
std::vector<int64_t> cp_chunk_ids(int cp, int cp_rank);
// The positions (0-based token indices of the full sequence) that rank `cp_rank` holds, in its
// local order: its two chunks of seq / (2 x cp) tokens each. seq must be a multiple of 2 x cp.
std::vector<int64_t> cp_local_positions(int64_t seq, int cp, int cp_rank);

// Megatron's generate_masked_orthogonal_rank_groups: for dimensions of `sizes` (fastest-varying
// first) flagged in `mask`, every group of ranks that differ only along those dimensions.
std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world,
                                                            const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask);

}  // namespace shardbench
