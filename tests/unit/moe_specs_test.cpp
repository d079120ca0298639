// The mixture-of-experts parameter specs and counts (workloads/moe/moe_specs.hpp) and the models'
// data (moe_models.hpp), against each other and against the published and the reference sizes
// (docs/moe.md, "Parameter counts").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/moe_test_dims.hpp"
#include "workloads/moe/moe_models.hpp"
#include "workloads/moe/moe_specs.hpp"

namespace shardbench {
namespace {

// Small models with every part the specs can hold: dense first layers, shared experts, QK-norm,
// MLA with and without a query down-projection.
MoeDims tiny_gqa() {
  MoeDims d = testing::small_moe_dims();
  d.shared_expert_ffn = 24;
  d.qk_layernorm = true;
  return d;
}

MoeDims tiny_mla(int64_t q_lora_rank, bool qk_layernorm) {
  MoeDims d = tiny_gqa();
  d.attention = MoeAttention::kMla;
  d.q_lora_rank = q_lora_rank;
  d.kv_lora_rank = 12;
  d.qk_head_dim = 8;
  d.qk_pos_emb_head_dim = 4;
  d.v_head_dim = 6;
  d.qk_layernorm = qk_layernorm;
  d.router_expert_bias = true;
  return d;
}

int64_t numel_sum(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs) n += s.numel();
  return n;
}

bool is_routed_expert(const std::string& name) {
  return name.find(".mlp.experts.") != std::string::npos;
}

// Every model of moe_models() and the tiny ones, with their MTP layers (DeepSeek-V3 and its
// cuts have one) and without; an MTP layer after dense layers only is dense.
std::vector<std::pair<std::string, MoeDims>> all_dims() {
  MoeDims mtp_after_dense = tiny_mla(10, true);
  mtp_after_dense.first_k_dense_replace = mtp_after_dense.num_layers;
  mtp_after_dense.mtp_num_layers = 2;
  std::vector<std::pair<std::string, MoeDims>> out = {{"tiny_gqa", tiny_gqa()},
                                                      {"tiny_mla", tiny_mla(10, true)},
                                                      {"tiny_mla_no_q_lora", tiny_mla(0, false)},
                                                      {"mtp_after_dense", mtp_after_dense}};
  for (const auto& m : moe_models()) out.emplace_back(m.name, m.dims);
  const size_t with_mtp = out.size();
  for (size_t i = 0; i < with_mtp; ++i) {
    auto copy = out[i];
    copy.first += copy.second.mtp_num_layers > 0 ? " without MTP" : " with 2 MTP layers";
    copy.second.mtp_num_layers = copy.second.mtp_num_layers > 0 ? 0 : 2;
    out.push_back(copy);
  }
  return out;
}

TEST(MoeSpecs, SpecsOfEveryEpRankSumToTheClosedFormCount) {
  for (const auto& [name, d] : all_dims()) {
    SCOPED_TRACE(name);
    const MoeParamCounts c = moe_parameter_count(d);
    EXPECT_EQ(numel_sum(moe_param_specs(d, 1, 0)), c.total_with_mtp());
    int64_t mtp = 0;
    for (const auto& s : moe_param_specs(d, 1, 0))
      mtp += s.name.rfind("mtp.", 0) == 0 ? s.numel() : 0;
    EXPECT_EQ(mtp, c.mtp);
    for (int ep : {2, 8}) {
      int64_t experts = 0;
      for (int r = 0; r < ep; ++r) {
        const auto specs = moe_param_specs(d, ep, r);
        EXPECT_EQ(numel_sum(specs), c.per_ep_rank_with_mtp(ep)) << "ep " << ep << " rank " << r;
        for (const auto& s : specs) {
          if (s.reduce_group == ReduceGroup::kExpertDataParallel) experts += s.numel();
        }
      }
      // The EP ranks together hold every routed expert once.
      EXPECT_EQ(experts, c.routed_experts_total() + c.mtp_routed_experts) << "ep " << ep;
    }
  }
}

// The MTP layers (Megatron's MultiTokenPredictionLayer): after the decoder layers, each its own
// module and unit, named under mtp.layers.<k>., with enorm, hnorm, eh_proj [h, 2h], the inner
// layer built like the last decoder layer (experts included) and final_layernorm, before the head.
TEST(MoeSpecs, MtpLayersFollowTheDecoderInTheirOwnUnits) {
  MoeDims d = tiny_mla(10, true);  // 3 layers, the first dense
  d.mtp_num_layers = 2;
  const auto specs = moe_param_specs(d, 2, 1);
  EXPECT_EQ(unit_count(d), 5);
  EXPECT_EQ(module_count(d), 7);
  EXPECT_EQ(head_module(d), 6);
  std::vector<std::string> mtp0;
  for (const auto& s : specs) {
    if (s.name.rfind("mtp.layers.0.", 0) == 0) {
      EXPECT_EQ(s.module, 4) << s.name;
      EXPECT_EQ(s.layer, 3) << s.name;
      mtp0.push_back(s.name.substr(13));
    }
    if (s.name.rfind("mtp.layers.1.", 0) == 0) {
      EXPECT_EQ(s.layer, 4) << s.name;
    }
    if (s.name == "output_layer.weight") {
      EXPECT_EQ(s.module, 6);
    }
  }
  ASSERT_GE(mtp0.size(), 6u);
  EXPECT_EQ(mtp0[0], "enorm.weight");
  EXPECT_EQ(mtp0[1], "hnorm.weight");
  EXPECT_EQ(mtp0[2], "eh_proj.weight");
  EXPECT_EQ(mtp0[3], "mtp_model_layer.input_layernorm.weight");
  EXPECT_EQ(mtp0.back(), "final_layernorm.weight");
  // Built like the last decoder layer: an MoE layer whose experts EP rank 1 of 2 holds (4..7).
  EXPECT_NE(std::find(mtp0.begin(), mtp0.end(), "mtp_model_layer.mlp.experts.linear_fc1.weight4"),
            mtp0.end());
  EXPECT_NE(std::find(mtp0.begin(), mtp0.end(), "mtp_model_layer.mlp.router.weight"), mtp0.end());
  for (const auto& s : specs) {
    if (s.name == "mtp.layers.0.eh_proj.weight") {
      EXPECT_EQ(s.shape, (std::vector<int64_t>{d.hidden, 2 * d.hidden}));
    }
  }
  // The router's expert bias of each MTP layer is a buffer too.
  d.router_expert_bias = true;
  const auto buffers = moe_buffer_specs(d);
  ASSERT_EQ(buffers.size(), 4u);  // decoder layers 1 and 2, MTP layers 0 and 1
  EXPECT_EQ(buffers[2].name, "mtp.layers.0.mtp_model_layer.mlp.router.expert_bias");
  EXPECT_EQ(buffers[2].layer, 3);
}

TEST(MoeSpecs, EachEpRankHoldsItsContiguousExpertsInTheExpertGroup) {
  const MoeDims d = tiny_gqa();  // 8 experts, layers 1 and 2 are MoE layers
  const int ep = 4;
  std::map<std::string, int> holders;  // expert weight name -> EP ranks that hold it
  std::vector<std::string> dense_names_of_rank0;
  for (int r = 0; r < ep; ++r) {
    std::vector<std::string> dense_names;
    for (const auto& s : moe_param_specs(d, ep, r)) {
      if (is_routed_expert(s.name)) {
        EXPECT_EQ(s.reduce_group, ReduceGroup::kExpertDataParallel) << s.name;
        ++holders[s.name];
        // Rank r holds the global experts 2r and 2r+1.
        const std::string index = s.name.substr(s.name.find(".weight") + 7);
        const int e = std::stoi(index);
        EXPECT_TRUE(e == 2 * r || e == 2 * r + 1) << s.name << " on rank " << r;
      } else {
        // The router and the shared experts are dense: reduced over the data-parallel group.
        EXPECT_EQ(s.reduce_group, ReduceGroup::kDataParallel) << s.name;
        dense_names.push_back(s.name);
      }
    }
    if (r == 0) dense_names_of_rank0 = dense_names;
    EXPECT_EQ(dense_names, dense_names_of_rank0) << "rank " << r << " differs in dense params";
  }
  // 2 MoE layers x 8 experts x (fc1, fc2), each held by exactly one rank.
  EXPECT_EQ(holders.size(), 2u * 8u * 2u);
  for (const auto& [name, count] : holders) EXPECT_EQ(count, 1) << name;
  // The router and the shared experts are among the dense parameters.
  int routers = 0, shared = 0;
  for (const auto& n : dense_names_of_rank0) {
    routers += n.find("mlp.router.weight") != std::string::npos;
    shared += n.find("mlp.shared_experts.") != std::string::npos;
  }
  EXPECT_EQ(routers, 2);
  EXPECT_EQ(shared, 4);
}

TEST(MoeSpecs, ModulesAndUnitsFollowLlamasLayoutInForwardOrder) {
  for (const auto& [name, d] : all_dims()) {
    if (d.num_layers > 8) continue;  // the layout is the same for any size
    SCOPED_TRACE(name);
    const auto specs = moe_param_specs(d, 2, 1);
    std::set<std::string> names;
    int previous_module = 0;
    bool expert_seen_in_module = false;
    for (const auto& s : specs) {
      EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
      EXPECT_GE(s.module, previous_module) << s.name << " runs before the module above it";
      if (s.module != previous_module) expert_seen_in_module = false;
      previous_module = s.module;
      if (s.module == 0) {
        EXPECT_EQ(s.name, "embedding.word_embeddings.weight");
        EXPECT_EQ(s.layer, -1);
      } else if (s.module == head_module(d)) {
        EXPECT_EQ(s.layer, -1) << s.name;
      } else {
        // Layer l is module l + 1 and FSDP unit l, and its name says so; MTP layer k is layer
        // L + k.
        EXPECT_EQ(s.layer, s.module - 1) << s.name;
        const std::string prefix =
            s.layer < d.num_layers ? "decoder.layers." + std::to_string(s.layer) + "."
                                   : "mtp.layers." + std::to_string(s.layer - d.num_layers) + ".";
        EXPECT_EQ(s.name.rfind(prefix, 0), 0u) << s.name;
        // Inside a unit the routed experts come last, after every dense parameter, but for an
        // MTP layer's final norm, which Megatron's MultiTokenPredictionLayer registers (and runs)
        // after its inner layer.
        if (is_routed_expert(s.name)) {
          expert_seen_in_module = true;
        } else if (s.name != prefix + "final_layernorm.weight") {
          EXPECT_FALSE(expert_seen_in_module) << s.name << " follows a routed expert";
        }
      }
      EXPECT_LT(s.module, module_count(d));
      // Norms (1-D) are the parameters without weight decay, initialised to ones.
      EXPECT_EQ(s.no_weight_decay, s.shape.size() == 1) << s.name;
      EXPECT_EQ(s.init_std == 0.0, s.shape.size() == 1) << s.name;
    }
    EXPECT_EQ(specs.back().name, "output_layer.weight");
    EXPECT_EQ(specs[specs.size() - 2].name, "decoder.final_layernorm.weight");
  }
}

TEST(MoeSpecs, FirstKDenseLayersHaveADenseMlpAndTheRestExperts) {
  MoeDims d = tiny_gqa();
  d.num_layers = 4;
  d.first_k_dense_replace = 2;
  std::map<int, std::set<std::string>> kinds;  // layer -> which MLP parts it has
  for (const auto& s : moe_param_specs(d, 1, 0)) {
    if (s.layer < 0) continue;
    if (s.name.find("mlp.linear_fc1.weight") != std::string::npos) kinds[s.layer].insert("dense");
    if (s.name.find("mlp.router.weight") != std::string::npos) kinds[s.layer].insert("router");
    if (is_routed_expert(s.name)) kinds[s.layer].insert("experts");
    if (s.name.find("mlp.shared_experts.") != std::string::npos) kinds[s.layer].insert("shared");
  }
  const std::set<std::string> dense = {"dense"};
  const std::set<std::string> moe = {"router", "experts", "shared"};
  EXPECT_EQ(kinds[0], dense);
  EXPECT_EQ(kinds[1], dense);
  EXPECT_EQ(kinds[2], moe);
  EXPECT_EQ(kinds[3], moe);
}

TEST(MoeSpecs, RefusesAnEpThatDoesNotDivideTheExperts) {
  const MoeDims d = tiny_gqa();  // 8 experts
  try {
    moe_param_specs(d, 3, 0);
    ADD_FAILURE() << "ep 3 over 8 experts accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.num_moe_experts=8"), std::string::npos) << what;
    EXPECT_NE(what.find("model.expert_model_parallel_size=3"), std::string::npos) << what;
  }
  EXPECT_THROW(moe_param_specs(d, 0, 0), std::invalid_argument);
  EXPECT_THROW(moe_param_specs(d, 4, 4), std::invalid_argument);  // rank outside [0, ep)
  EXPECT_THROW(moe_param_specs(d, 4, -1), std::invalid_argument);
  EXPECT_THROW(moe_parameter_count(d).per_ep_rank(3), std::invalid_argument);
  EXPECT_NO_THROW(moe_param_specs(d, 8, 7));
}

TEST(MoeSpecs, RefusesWhatItDoesNotBuild) {
  MoeDims mtp = tiny_gqa();
  mtp.mtp_num_layers = 1;
  EXPECT_THROW(moe_param_specs(mtp, 1, 0, 2), std::invalid_argument);
  EXPECT_THROW(moe_param_specs(tiny_mla(10, true), 1, 0, 2), std::invalid_argument);
  MoeDims topk = tiny_gqa();
  topk.router_topk = 9;
  EXPECT_THROW(moe_param_specs(topk, 1, 0), std::invalid_argument);
  MoeDims first_k = tiny_gqa();
  first_k.first_k_dense_replace = 4;
  EXPECT_THROW(moe_param_specs(first_k, 1, 0), std::invalid_argument);
  MoeDims groups = tiny_gqa();
  groups.kv_heads = 3;
  EXPECT_THROW(moe_param_specs(groups, 1, 0), std::invalid_argument);
}

TEST(MoeSpecs, TensorParallelSplitsTheDenseMatricesAndKeepsExpertsWhole) {
  const MoeDims d = tiny_gqa();
  const auto one = moe_param_specs(d, 2, 0, 1);
  const auto two = moe_param_specs(d, 2, 0, 2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    SCOPED_TRACE(one[i].name);
    EXPECT_EQ(two[i].name, one[i].name);
    EXPECT_EQ(two[i].full_shape, one[i].shape);
    if (is_routed_expert(one[i].name) || one[i].name.find("router") != std::string::npos ||
        one[i].shape.size() == 1) {
      // Expert tensor parallelism 1; the router and the norms are whole on every TP rank.
      EXPECT_EQ(two[i].tp_dim, -1);
      EXPECT_EQ(two[i].shape, one[i].shape);
    } else {
      ASSERT_GE(two[i].tp_dim, 0);
      auto halved = one[i].shape;
      halved[static_cast<size_t>(two[i].tp_dim)] /= 2;
      EXPECT_EQ(two[i].shape, halved);
    }
  }
  MoeDims odd_shared = d;
  odd_shared.shared_expert_ffn = 25;
  try {
    moe_param_specs(odd_shared, 1, 0, 2);
    ADD_FAILURE() << "an odd shared-expert width split over 2 TP ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.moe_shared_expert_intermediate_size=25"),
              std::string::npos)
        << e.what();
  }
}

TEST(MoeSpecs, RouterExpertBiasIsABufferNotAParameter) {
  // Megatron's TopKRouter registers expert_bias with register_buffer: no gradient, no optimizer
  // state, but checkpointed (docs/moe.md, "Parameters of one expert-parallel rank").
  const MoeDims d = deepseek_v3_dims();
  for (const auto& s : moe_param_specs(d, 64, 5)) {
    EXPECT_EQ(s.name.find("expert_bias"), std::string::npos) << s.name;
  }
  const auto buffers = moe_buffer_specs(d);
  // One per MoE layer: 61 layers, the first 3 dense, and the MTP layer (an MoE layer).
  ASSERT_EQ(buffers.size(), 59u);
  EXPECT_EQ(buffers.front().name, "decoder.layers.3.mlp.router.expert_bias");
  EXPECT_EQ(buffers.front().module, 4);
  EXPECT_EQ(buffers[57].layer, 60);
  EXPECT_EQ(buffers.back().name, "mtp.layers.0.mtp_model_layer.mlp.router.expert_bias");
  EXPECT_EQ(buffers.back().layer, 61);
  for (const auto& b : buffers) EXPECT_EQ(b.numel, 256);
  EXPECT_TRUE(moe_buffer_specs(qwen3_30b_a3b_dims()).empty());
}

// A published size `published` (in billions) whose last printed unit is `unit`: the publishers do
// not say how they round, and their own figures show both (docs/moe.md, "Parameter counts"), so a
// count is consistent with it when it rounds to it or truncates to it.
void expect_published(double count, double published, double unit, const char* what) {
  const double billions = count / 1e9;
  EXPECT_GE(billions, published - unit / 2) << what;
  EXPECT_LT(billions, published + unit) << what;
}

TEST(MoeSpecs, CountsMatchThePublishedSizes) {
  const MoeParamCounts ds = moe_parameter_count(deepseek_v3_dims());
  // DeepSeek-V3 technical report: 671B total, 37B activated per token (the MTP module apart).
  expect_published(static_cast<double>(ds.total()), 671, 1, "DeepSeek-V3 total");
  expect_published(static_cast<double>(ds.active()), 37, 1, "DeepSeek-V3 active");
  // Qwen3-30B-A3B: 30.5B total, 3.3B activated (model card); the name's 30B and 3B.
  const MoeParamCounts q30 = moe_parameter_count(qwen3_30b_a3b_dims());
  expect_published(static_cast<double>(q30.total()), 30.5, 0.1, "Qwen3-30B-A3B total");
  expect_published(static_cast<double>(q30.active()), 3.3, 0.1, "Qwen3-30B-A3B active");
  expect_published(static_cast<double>(q30.total()), 30, 1, "Qwen3-30B-A3B name");
  expect_published(static_cast<double>(q30.active()), 3, 1, "Qwen3-30B-A3B name (A3B)");
  // Qwen3-235B-A22B: 235B total, 22B activated.
  const MoeParamCounts q235 = moe_parameter_count(qwen3_235b_a22b_dims());
  expect_published(static_cast<double>(q235.total()), 235, 1, "Qwen3-235B-A22B total");
  expect_published(static_cast<double>(q235.active()), 22, 1, "Qwen3-235B-A22B active");
}

TEST(MoeSpecs, CountsMatchTheReferenceDerivedSizes) {
  // docs/moe.md, "Parameter counts": sizes derived from the configs, printed to the digits below.
  const MoeParamCounts ds = moe_parameter_count(deepseek_v3_dims());
  EXPECT_NEAR(ds.attention_per_layer / 1e6, 187.1, 0.05);  // MLA per layer
  EXPECT_NEAR(ds.routed_expert / 1e6, 44.04, 0.005);
  EXPECT_NEAR(ds.total() / 1e9, 671.0, 0.05);
  EXPECT_NEAR(ds.mtp / 1e9, 11.6, 0.05);
  EXPECT_NEAR(ds.active() / 1e9, 37.6, 0.05);
  const MoeParamCounts q30 = moe_parameter_count(qwen3_30b_a3b_dims());
  EXPECT_NEAR(q30.attention_per_layer / 1e6, 18.9, 0.05);
  EXPECT_NEAR(q30.routed_expert / 1e6, 4.72, 0.005);
  EXPECT_NEAR(q30.num_experts * q30.routed_expert / 1e9, 0.60, 0.005);
  EXPECT_NEAR(q30.total() / 1e9, 30.5, 0.05);
  EXPECT_NEAR(q30.active() / 1e9, 3.35, 0.005);
  const MoeParamCounts q235 = moe_parameter_count(qwen3_235b_a22b_dims());
  EXPECT_NEAR(q235.attention_per_layer / 1e6, 71.3, 0.05);
  EXPECT_NEAR(q235.routed_expert / 1e6, 18.87, 0.005);
  EXPECT_NEAR(q235.num_experts * q235.routed_expert / 1e9, 2.42, 0.005);
  EXPECT_NEAR(q235.total() / 1e9, 235.1, 0.05);
  EXPECT_NEAR(q235.active() / 1e9, 22.2, 0.05);
}

TEST(MoeSpecs, BenchShapeIsIssue38sEstimate) {
  // Issue 38: hidden 2048, 8 layers, 64 experts of 768, top-8: "about 3.2 B parameters, most of
  // them experts, ~51 GiB of fp32 weights, gradients and Adam state" (16 bytes per parameter;
  // the figure is 51 GB, i.e. 47.5 GiB).
  const MoeParamCounts c = moe_parameter_count(moe_bench_3b_dims());
  expect_published(static_cast<double>(c.total()), 3.2, 0.1, "bench total");
  EXPECT_GT(c.routed_experts_total(), c.total() / 2);
  EXPECT_NEAR(16.0 * static_cast<double>(c.total()) / 1e9, 51, 0.5);
}

// The one-GPU cut of DeepSeek-V3 keeps every kind of its architecture (MLA with DeepSeek-V3's
// ranks, head dims and YaRN; the sigmoid router with the expert bias, group limit and scaling;
// a shared expert; dense first layers; an MTP layer) and fits an 80 GB GPU with fp32 Adam
// state: 2.83 B parameters and 3.17 B with the MTP layer, 50.6 GB at 16 bytes each, as its
// recipe's description says.
TEST(MoeModels, DeepSeekV3CutKeepsTheArchitectureAndFitsOneGpu) {
  const MoeModelFacts& full = find_moe_model("deepseek_v3");
  for (const char* name : {"deepseek_v3_cut_1gpu", "deepseek_v3_tiny_cpu"}) {
    SCOPED_TRACE(name);
    const MoeModelFacts& cut = find_moe_model(name);
    const MoeDims &d = cut.dims, &f = full.dims;
    EXPECT_EQ(d.attention, MoeAttention::kMla);
    EXPECT_TRUE(d.qk_layernorm);
    EXPECT_GT(d.q_lora_rank, 0);
    EXPECT_EQ(d.rope_type, MoeRopeType::kYarn);
    EXPECT_EQ(d.rotary_scaling_factor, f.rotary_scaling_factor);
    EXPECT_EQ(d.mscale_all_dim, f.mscale_all_dim);
    EXPECT_TRUE(d.router_expert_bias);
    EXPECT_GT(d.shared_expert_ffn, 0);
    EXPECT_EQ(d.mtp_num_layers, f.mtp_num_layers);
    EXPECT_GT(d.first_k_dense_replace, 0);
    EXPECT_LT(d.first_k_dense_replace, d.num_layers);
    EXPECT_EQ(cut.router.score_function, MoeRouterScore::kSigmoid);
    EXPECT_GT(cut.router.num_groups, 0);
    EXPECT_EQ(cut.router.topk_scaling_factor, full.router.topk_scaling_factor);
    EXPECT_EQ(cut.router.load_balancing, full.router.load_balancing);
  }
  const MoeDims d = deepseek_v3_cut_1gpu_dims(), f = deepseek_v3_dims();
  EXPECT_EQ(d.q_lora_rank, f.q_lora_rank);
  EXPECT_EQ(d.kv_lora_rank, f.kv_lora_rank);
  EXPECT_EQ(d.qk_head_dim, f.qk_head_dim);
  EXPECT_EQ(d.qk_pos_emb_head_dim, f.qk_pos_emb_head_dim);
  EXPECT_EQ(d.v_head_dim, f.v_head_dim);
  EXPECT_EQ(d.vocab, f.vocab);
  const MoeParamCounts c = moe_parameter_count(d);
  EXPECT_EQ(c.total() / 10'000'000, 283) << c.total();           // 2.83 B
  EXPECT_EQ(c.total_with_mtp() / 10'000'000, 316) << c.total();  // 3.17 B with the MTP layer
  const int64_t state = 16 * c.total_with_mtp();
  EXPECT_NEAR(static_cast<double>(state) / 1e9, 50.6, 0.05) << state;
  EXPECT_LT(state, 60'000'000'000);  // 20 GB or more left for activations on 80 GB
}

TEST(MoeModels, RecipesAreConsistentData) {
  std::set<std::string> names;
  for (const auto& m : moe_models()) {
    SCOPED_TRACE(m.name);
    EXPECT_TRUE(names.insert(m.name).second);
    EXPECT_NO_THROW(validate_moe_dims(m.dims));
    EXPECT_EQ(&find_moe_model(m.name), &m);
    // The vocabulary is already a multiple of Megatron's padding unit at TP 1, so `vocab` is both
    // the tokenizer's and the padded size.
    EXPECT_EQ(m.dims.vocab % m.make_vocab_size_divisible_by, 0);
    // Group-limited routing: whole groups of experts, and top-k spread evenly over the kept groups.
    if (m.router.num_groups > 0) {
      EXPECT_EQ(m.dims.num_experts % m.router.num_groups, 0);
      EXPECT_LE(m.router.group_topk, m.router.num_groups);
      EXPECT_EQ(m.dims.router_topk % m.router.group_topk, 0);
    }
    // Megatron allows the expert bias only with sigmoid (or sqrtsoftplus) scores.
    if (m.dims.router_expert_bias) {
      EXPECT_EQ(m.router.score_function, MoeRouterScore::kSigmoid);
    }
    // Every recipe's EP divides the experts (Megatron-Bridge perf recipes: EP 8 to 64).
    EXPECT_NO_THROW(moe_local_experts(m.dims, 8));
  }
  EXPECT_THROW(find_moe_model("deepseek_v4"), std::invalid_argument);
}

// YaRN's frequencies and scales for DeepSeek-V3's RoPE dims (64 dims, base 10000, factor 40,
// original context 4096, beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1), computed by
// hand from Megatron's formula (MLM:megatron/core/models/common/embeddings/
// yarn_rotary_pos_embedding.py): the correction range is floor(64 ln(4096 / (32 2pi)) /
// (2 ln 10000)) = floor(10.47) = 10 to ceil(64 ln(4096 / 2pi) / (2 ln 10000)) = ceil(22.51) = 23;
// pair i has ramp r = clamp((i - 10) / 13, 0, 1) and frequency 10000^(-i/32) (1 - r + r / 40).
// The concentration factor is mscale(40, 1) / mscale(40, 1) = 1 and the softmax scale
// (1 + 0.1 ln 40)^2 / sqrt(128 + 64).
TEST(MoeMlaRope, YarnFrequenciesAndScalesAsMegatronsFormula) {
  const MoeDims d = deepseek_v3_dims();
  const MlaRope r = mla_rope(d);
  ASSERT_EQ(r.inv_freq.size(), 32u);
  EXPECT_EQ(r.ramp_low, 10.0);
  EXPECT_EQ(r.ramp_high, 23.0);
  const std::pair<size_t, double> by_hand[] = {{0, 1.0},
                                               {10, 0.05623413251903491},
                                               {11, 0.03900692656714386},
                                               {16, 0.0055},
                                               {22, 0.0001778279410038922},
                                               {23, 3.33380358040831e-05},
                                               {31, 3.3338035804083097e-06}};
  for (const auto& [i, f] : by_hand) EXPECT_NEAR(r.inv_freq[i], f, 1e-12 * f) << "pair " << i;
  EXPECT_DOUBLE_EQ(r.concentration, 1.0);
  EXPECT_NEAR(r.softmax_scale, 0.1352337788608801, 1e-15);
  EXPECT_NEAR(yarn_mscale(40.0, 1.0), 1.3688879454113936, 1e-15);
  EXPECT_EQ(yarn_mscale(1.0, 1.0), 1.0);

  // Megatron's default mscale_all_dim 0: cos and sin carry mscale(40, 1), the softmax scale is
  // 1 / sqrt(192).
  MoeDims megatron_default = d;
  megatron_default.mscale_all_dim = 0.0;
  const MlaRope m = mla_rope(megatron_default);
  EXPECT_NEAR(m.concentration, 1.3688879454113936, 1e-15);
  EXPECT_NEAR(m.softmax_scale, 0.07216878364870323, 1e-15);
  EXPECT_EQ(m.inv_freq, r.inv_freq);

  // Plain RoPE: the base frequencies; the softmax scale still takes mscale_all_dim.
  MoeDims plain = d;
  plain.rope_type = MoeRopeType::kRope;
  const MlaRope p = mla_rope(plain);
  EXPECT_NEAR(p.inv_freq[16], 0.01, 1e-15);
  EXPECT_NEAR(p.inv_freq[31], 1e-4 * std::pow(10000.0, 1.0 / 32.0), 1e-15);
  EXPECT_EQ(p.concentration, 1.0);
  EXPECT_NEAR(p.softmax_scale, 0.1352337788608801, 1e-15);

  // The checks: GQA has no MLA RoPE; odd RoPE dims and a zero factor are refused by name.
  EXPECT_THROW(mla_rope(qwen3_30b_a3b_dims()), std::invalid_argument);
  MoeDims odd = d;
  odd.qk_pos_emb_head_dim = 63;
  try {
    mla_rope(odd);
    ADD_FAILURE() << "odd RoPE dims accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.qk_pos_emb_head_dim=63"), std::string::npos)
        << e.what();
  }
  MoeDims zero = d;
  zero.rotary_scaling_factor = 0.0;
  EXPECT_THROW(mla_rope(zero), std::invalid_argument);
}

}  // namespace
}  // namespace shardbench
