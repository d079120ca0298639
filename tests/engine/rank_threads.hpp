// Test helper: runs one function per rank on threads of this process, each rank with its own
// gloo process groups (the c10d backend the workers use) over one in-process store.
//
// The one retried error. Under heavy load (load averages above 10 on the 2-core CI machine) the
// full-mesh connect of in-process ranks has failed once in 2,740 test runs: one rank's
// connection to a peer's gloo listener is closed right after it is made ("Connection closed by
// peer" from gloo's tcp::Pair) while that peer never sees it and waits for it until its connect
// timeout. The cause is not found (docs/testing.md, "The in-process gloo connect" lists what was
// ruled out). Group creation is therefore retried, at most kMeshConnectAttempts times and only
// when a rank's creation failed with kMeshConnectError; every retry is printed, appended to the
// file named by SHARDBENCH_TEST_RETRY_LOG (scripts/test counts them at the end of a run) with a
// snapshot of this process's sockets, and the groups are created afresh under new store keys. Any
// other error fails the test at once, as does a connect failure on the last attempt.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "harness/config/parallel_layout.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/parallel/process_group.hpp"

namespace shardbench::testing {

inline constexpr const char* kMeshConnectError = "Gloo connectFullMesh failed";
inline constexpr int kMeshConnectAttempts = 3;

// Creates one rank's groups for one attempt; `attempt` keys the store so that a retry never reads
// the addresses of a failed attempt.
using GroupFactory = std::function<ProcessGroups(const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int world, int attempt)>;

// Every rank waits here until all ranks have arrived, so that the mesh connect that follows can
// run under a short timeout without a slow-starting rank timing out its peers' rendezvous.
inline void store_barrier(c10d::Store& store, const std::string& key, int world) {
  if (store.add(key + "/arrived", 1) == world) store.set(key + "/all", std::vector<uint8_t>{1});
  store.wait({key + "/all"}, std::chrono::seconds(120));
}

inline ProcessGroups create_gloo_groups(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                        int world, int attempt) {
  ProcessGroupOptions po;
  po.timeout = std::chrono::seconds(60);
  // A failed connect must end every rank's wait quickly (gloo waits five times this for a
  // peer) so that a retry fits in the test's time.
  po.connect_timeout = std::chrono::seconds(8);
  const std::string tag = "attempt" + std::to_string(attempt) + "/";
  auto group = [&](const char* name) {
    store_barrier(*store, tag + name + "/barrier", world);
    return ProcessGroup::create(store, tag + name, rank, world, po);
  };
  ProcessGroups pgs;
  pgs.world = group("world");
  pgs.all_gather = group("ag");
  pgs.reduce_scatter = group("rs");
  return pgs;
}

// One rank's groups in Megatron's rank order (`layout`), created under store keys tagged `tag`:
// the engine's world, all-gather and reduce-scatter groups span its instance (its data-parallel
// group with one instance), `tp` its tensor-parallel group, `cp` its context-parallel group and
// `outer` its cross-instance group
// (each only where its size is above 1); with `experts` also the expert groups (docs/moe.md): the
// rank's expert-data-parallel instance, its cross-instance expert group and its EP group.
inline ProcessGroups layout_groups(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   const ParallelLayout& layout, const std::string& tag,
                                   bool experts) {
  ProcessGroupOptions po;
  po.timeout = std::chrono::seconds(60);
  po.connect_timeout = std::chrono::seconds(8);
  auto group = [&](const std::vector<int>& members, const std::string& name) {
    int me = 0;
    while (members[static_cast<size_t>(me)] != rank) ++me;
    const std::string key = tag + name + std::to_string(members.front());
    store_barrier(*store, key + "/barrier", static_cast<int>(members.size()));
    return ProcessGroup::create(store, key, me, static_cast<int>(members.size()), po);
  };
  const std::vector<int> instance = layout.instance_group_of(rank);
  ProcessGroups pgs;
  pgs.world = group(instance, "dp/world");
  pgs.all_gather = group(instance, "dp/ag");
  pgs.reduce_scatter = group(instance, "dp/rs");
  if (layout.tp > 1) pgs.tp = group(layout.group_of("tp", rank), "tp/");
  if (layout.cp > 1) pgs.cp = group(layout.group_of("cp", rank), "cp/");
  if (layout.dp_instances > 1) pgs.outer = group(layout.cross_instance_group_of(rank), "outer/");
  if (!experts) return pgs;
  const std::vector<int> edp = layout.expert_instance_group_of(rank);
  pgs.expert_world = group(edp, "edp/world");
  pgs.expert_all_gather = group(edp, "edp/ag");
  pgs.expert_reduce_scatter = group(edp, "edp/rs");
  if (layout.dp_instances > 1) {
    pgs.expert_outer = group(layout.expert_cross_instance_group_of(rank), "eouter/");
  }
  pgs.ep = group(layout.expert_group_of("ep", rank), "ep/");
  return pgs;
}

// Each rank's groups with `tp` tensor-parallel ranks, `instances` HSDP instances and `cp`
// context-parallel ranks.
inline GroupFactory layout_group_factory(int tp, int instances, int cp = 1) {
  return [tp, instances, cp](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                             int attempt) {
    return layout_groups(store, rank, ParallelLayout::make(world, tp, cp, 1, 1, instances),
                         "layout_attempt" + std::to_string(attempt) + "/", false);
  };
}

// Each rank's groups, expert groups included, with `ep` expert-parallel ranks and `instances`
// HSDP instances.
inline GroupFactory expert_layout_group_factory(int ep, int instances) {
  return [ep, instances](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                         int attempt) {
    return layout_groups(store, rank, ParallelLayout::make(world, 1, 1, ep, 1, instances),
                         "expert_attempt" + std::to_string(attempt) + "/", true);
  };
}

inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// Prints and logs one retry: the test, the attempt, each rank's error, and this process's TCP
// sockets (for the next person looking for the cause).
inline void log_mesh_retry(int attempt, const std::vector<std::string>& errors) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string text = std::string("shardbench-test-retry: ") +
                     (info ? std::string(info->test_suite_name()) + "." + info->name() : "?") +
                     ": gloo group creation attempt " + std::to_string(attempt) + " of " +
                     std::to_string(kMeshConnectAttempts) + " failed; retrying\n";
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) text += "  rank " + std::to_string(r) + ": " + first_line(errors[r]) + "\n";
  }
  std::string sockets;
  const std::string command = "ss -tanpe 2>/dev/null | grep 'pid=" + std::to_string(getpid()) + ",'";
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, pipe)) sockets += std::string("    ") + buf;
    pclose(pipe);
  }
  std::fputs(text.c_str(), stderr);
  if (const char* path = std::getenv("SHARDBENCH_TEST_RETRY_LOG"); path && *path) {
    std::ofstream(path, std::ios::app) << text << "  sockets of this process:\n" << sockets;
  }
}

inline void run_on_ranks_with(int world, const std::function<void(int, ProcessGroups&)>& fn,
                              const GroupFactory& factory) {
  at::set_num_threads(1);
  prepare_thread_ranks();  // the ranks below are threads of this process
  // The ranks share one HashStore instead of a TCPStore on a loopback port, because a port can be
  // taken over: perf-launch (started by the e2e tests, next to this process under ctest -j) picks
  // MASTER_PORT by binding port 0 and closing the socket, and its rank 0 binds that port again
  // only after loading libtorch. A TCPStore server of this process given the same port in that
  // window is joined by perf-launch's other ranks. A HashStore has no port to share.
  auto shared_store = c10::make_intrusive<c10d::HashStore>();
  shared_store->setTimeout(std::chrono::seconds(120));
  const c10::intrusive_ptr<c10d::Store> store = shared_store;

  std::vector<std::optional<ProcessGroups>> groups(static_cast<size_t>(world));
  std::vector<std::string> failures(static_cast<size_t>(world));
  for (int attempt = 1;; ++attempt) {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          groups[static_cast<size_t>(rank)] = factory(store, rank, world, attempt);
        } catch (const std::exception& e) {
          failures[static_cast<size_t>(rank)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    bool any_failed = false;
    bool connect_failed = false;
    for (const auto& f : failures) {
      any_failed |= !f.empty();
      connect_failed |= f.find(kMeshConnectError) != std::string::npos;
    }
    if (!any_failed) break;
    // A connect failure leaves its peers failing in other ways (a connect or rendezvous
    // timeout): the attempt is retried when any rank names the connect error.
    if (!connect_failed || attempt == kMeshConnectAttempts) {
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(failures[static_cast<size_t>(rank)], "")
            << "rank " << rank << " (creating its process groups, attempt " << attempt << ")";
      }
      return;
    }
    log_mesh_retry(attempt, failures);
    for (auto& g : groups) g.reset();
    for (auto& f : failures) f.clear();
  }

  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank, *groups[static_cast<size_t>(rank)]);
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

inline void run_on_ranks(int world, const std::function<void(int, ProcessGroups&)>& fn) {
  run_on_ranks_with(world, fn, create_gloo_groups);
}

}  // namespace shardbench::testing
