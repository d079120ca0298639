// Context parallelism at resolution (harness/config/context_parallel.hpp, docs/context-parallel.md
// "Validation") and its load-balanced split (harness/config/parallel_layout.hpp): -cp N on a valid
// model is accepted; every setting the context-parallel engine does not run is refused before any
// worker starts, with one line naming the field, its value, its source and what is accepted.
#include <gtest/gtest.h>

#include "harness/config/errors.hpp"
#include "harness/config/parallel_layout.hpp"
#include "harness/config/resolve.hpp"
#include "tests/resolve_error.hpp"

namespace shardbench {
namespace {

using testing_util::no_gpu;

// The tiny CPU model (sequence 32) on `gpus` gloo ranks.
ResolvedConfig resolve_tiny(const std::vector<std::string>& extra, const std::string& gpus = "4") {
  return testing_util::resolve_tiny_cpu(extra, gpus);
}

std::string tiny_error(std::vector<std::string> extra, const std::string& gpus = "4") {
  try {
    resolve_tiny(std::move(extra), gpus);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

// Megatron's head-tail order: rank r keeps chunks r and 2cp-1-r (CP 2: {0, 3} and {1, 2}).
TEST(ContextParallelSplit, HeadTailChunksAsMegatron) {
  EXPECT_EQ(cp_chunk_ids(1, 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(cp_chunk_ids(2, 0), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(cp_chunk_ids(2, 1), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(cp_chunk_ids(4, 1), (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(cp_chunk_ids(4, 3), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(cp_local_positions(8, 2, 1), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(cp_local_positions(8, 2, 0), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_THROW(cp_local_positions(6, 2, 0), std::invalid_argument);  // not 4 chunks
  EXPECT_THROW(cp_chunk_ids(2, 2), std::invalid_argument);
}

// Every position once, and the causal work per rank (keys seen by its queries) equal: what the
// order is for.
TEST(ContextParallelSplit, EveryPositionOnceAndEqualCausalWork) {
  for (int cp : {1, 2, 4, 8}) {
    const int64_t seq = 16 * cp;
    std::vector<int> seen(static_cast<size_t>(seq), 0);
    std::vector<int64_t> work;
    for (int r = 0; r < cp; ++r) {
      int64_t keys = 0;
      for (int64_t p : cp_local_positions(seq, cp, r)) {
        ++seen[static_cast<size_t>(p)];
        keys += p + 1;
      }
      work.push_back(keys);
    }
    for (int64_t p = 0; p < seq; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 1) << cp << " " << p;
    for (int64_t w : work) EXPECT_EQ(w, work[0]) << "CP " << cp;
  }
}

TEST(ContextParallelValidation, CpOnAValidModelIsAccepted) {
  const ResolvedConfig r = resolve_tiny({"-cp", "2"});
  EXPECT_EQ(r.config.model.context_parallel_size, 2);
  EXPECT_EQ(r.config.model.cp_comm_type, "all_gather");
  EXPECT_EQ(r.data_parallel_size, 2);
  EXPECT_EQ(tiny_error({"-cp", "2", "--use_megatron_fsdp", "true"}), "(accepted)");
  EXPECT_EQ(tiny_error({"-cp", "2", "dist.use_torch_fsdp2=true",
                        "model.gradient_accumulation_fusion=false"}),
            "(accepted)");
  EXPECT_EQ(tiny_error({"-cp", "4"}), "(accepted)");
  EXPECT_EQ(tiny_error({"-cp", "2", "-tp", "2"}, "8"), "(accepted)");
  EXPECT_EQ(tiny_error({"-cp", "2", "-rl", "1"}), "(accepted)");
}

TEST(ContextParallelValidation, RefusesWhatTheEngineDoesNotRun) {
  EXPECT_EQ(tiny_error({"-cp", "2", "model.cp_comm_type=p2p"}),
            "model.cp_comm_type=p2p (from override model.cp_comm_type=p2p): not implemented: the "
            "K/V exchange is an all-gather per layer (Megatron's all_gather); the ring (p2p, "
            "Megatron's default), a2a and a2a+p2p are not implemented "
            "(docs/context-parallel.md); accepted: all_gather");
  EXPECT_NE(tiny_error({"-cp", "2", "model.cp_comm_type=a2a"}).find("accepted: all_gather"),
            std::string::npos);
  // 32 tokens: CP 4 x TP 2 x 2 chunks needs a multiple of 16; CP 8 a multiple of 16 too but 32
  // tokens over 8 CP x 2 x TP 2 = 32 is fine; CP 16 is not.
  EXPECT_EQ(tiny_error({"-cp", "4", "-tp", "2", "model.seq_length=24"}, "8"),
            "model.seq_length=24 (from override model.seq_length=24): not divisible by 2 x "
            "context_parallel_size x tensor_model_parallel_size = 16 (2 x CP chunks per "
            "sequence, each CP rank's positions split over the TP ranks); accepted: a multiple "
            "of 16");
  EXPECT_EQ(tiny_error({"-cp", "2", "-ol", "1"}),
            "model.cpu_offloading=true (from override set recompute_offload): CPU activation "
            "offload (-ol) is not implemented with context parallelism "
            "(model.context_parallel_size=2); accepted: false, or model.context_parallel_size=1");
  EXPECT_NE(tiny_error({"-cp", "2", "-c", "fp8_cs", "shardbench.compute_dtype=bf16"})
                .find("mixed_precision.fp8"),
            std::string::npos);
  // The world must divide by TP x CP x PP (Megatron-Bridge's rule).
  EXPECT_NE(tiny_error({"-cp", "4"}, "2").find("not divisible by TP * PP * CP"), std::string::npos)
      << tiny_error({"-cp", "4"}, "2");
}

TEST(ContextParallelValidation, RefusesAMixtureOfExperts) {
  const std::string e =
      tiny_error({"-cp", "2", "model.num_moe_experts=4", "model.moe_ffn_hidden_size=32"});
  EXPECT_NE(e.find("is not implemented with context parallelism (model.context_parallel_size=2)"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace shardbench
