// NVTX names of one operation per engine group, built once: FSDP units by their layer
// ("all_gather/unit_3"; units are groups 0..L-1 in layer order), the FSDP root group (embedding,
// final norm, head: "all_gather/root") and DDP buckets ("reduce/bucket_2"). Shared by the
// collectives of engine_step.cpp and Torch FSDP2's copies in engine_fsdp2.cpp.
#pragma once

#include <string>

#include "harness/measure/nvtx.hpp"
#include "harness/parallel/engine_group.hpp"

namespace shardbench {

class GroupLabels {
 public:
  GroupLabels(const std::string& op, nvtx::Color color)
      : unit_(op + "/unit_", color), bucket_(op + "/bucket_", color), root_(op + "/root", color) {}
  const nvtx::Label& operator()(const EngineGroup& g) const {
    if (g.is_unit) return unit_[g.index];
    return g.is_root ? root_ : bucket_[g.index];
  }

 private:
  nvtx::LabelTable unit_, bucket_;
  nvtx::Label root_;
};

}  // namespace shardbench
