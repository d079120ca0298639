// Test helper: runs one function per rank on threads of this process, each rank with its own
// gloo process groups over a loopback TCPStore (the same c10d path the workers use).
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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
  c10d::TCPStoreOptions server_opts;
  server_opts.port = 0;
  server_opts.isServer = true;
  server_opts.numWorkers = world;
  server_opts.waitWorkers = false;
  server_opts.timeout = std::chrono::seconds(60);
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_opts);
  const auto port = server->getPort();
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        c10d::TCPStoreOptions o;
        o.port = port;
        o.timeout = std::chrono::seconds(60);
        auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
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
