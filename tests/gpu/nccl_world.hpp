// GPU test helper: the engine's three NCCL process groups at world size 1 on device 0, over a
// loopback TCPStore.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/parallel/engine.hpp"

namespace shardbench::testing {

inline ProcessGroups nccl_world1() {
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.numWorkers = 1;
  so.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  ProcessGroupOptions po;
  po.backend = CommBackend::kNccl;
  po.device_index = 0;
  ProcessGroups pgs;  // no tensor-parallel, outer or expert groups
  pgs.world = ProcessGroup::create(store, "world", 0, 1, po);
  pgs.all_gather = ProcessGroup::create(store, "ag", 0, 1, po);
  pgs.reduce_scatter = ProcessGroup::create(store, "rs", 0, 1, po);
  return pgs;
}

}  // namespace shardbench::testing
