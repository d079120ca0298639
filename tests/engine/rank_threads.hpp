// Test helper: runs one function per rank on threads of this process, each rank with its own
// gloo process groups (the c10d backend the workers use) over one in-process store.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "harness/parallel/engine.hpp"

namespace shardbench::testing {

inline void run_on_ranks(int world, const std::function<void(int, ProcessGroups&)>& fn) {
  at::set_num_threads(1);
  // Ranks that are threads of one process share c10d's FlightRecorder singleton, whose first
  // record of each process group inserts into a map outside its mutex (torch 2.11,
  // FlightRecorderDetail.hpp, recordWithResetEnabled): concurrent first collectives of different
  // groups corrupt it (seen as a SIGSEGV in ProcessGroupGloo::enqueue). perf-launch runs one
  // process per rank and never shares it. Read once, when the first group records.
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  // The ranks share one HashStore instead of a TCPStore on a loopback port, because a port can be
  // taken over: perf-launch (started by the e2e tests, next to this process under ctest -j) picks
  // MASTER_PORT by binding port 0 and closing the socket, and its rank 0 binds that port again
  // only after loading libtorch. A TCPStore server of this process given the same port in that
  // window is joined by perf-launch's other ranks, whose "world" group writes its gloo addresses
  // over ours: a rank then connects its mesh to a worker of the other run and fails with
  // "Connection closed by peer" in connectFullMesh when that run dies, while its peer waits in
  // connect. A HashStore has no port to share.
  auto shared_store = c10::make_intrusive<c10d::HashStore>();
  shared_store->setTimeout(std::chrono::seconds(60));
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        const c10::intrusive_ptr<c10d::Store> store = shared_store;
        ProcessGroupOptions po;
        po.timeout = std::chrono::seconds(60);
        ProcessGroups pgs{ProcessGroup::create(store, "world", rank, world, po),
                          ProcessGroup::create(store, "ag", rank, world, po),
                          ProcessGroup::create(store, "rs", rank, world, po)};
        fn(rank, pgs);
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(failures[static_cast<size_t>(rank)], "") << "rank " << rank;
  }
}

}  // namespace shardbench::testing
