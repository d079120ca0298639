// First thing shardbench proves: Debian's gloo headers plus the torch wheel give a working
// ProcessGroupGloo from C++. Two ranks (threads) over a TCPStore on loopback run all-reduce,
// _allgather_base and _reduce_scatter_base with exact results.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/parallel/process_group.hpp"

namespace shardbench {
namespace {

TEST(GlooProbe, TwoRanksOverTcpStoreRunTensorCollectives) {
  constexpr int kWorld = 2;
  c10d::TCPStoreOptions server_opts;
  server_opts.port = 0;  // ephemeral
  server_opts.isServer = true;
  server_opts.numWorkers = kWorld;
  server_opts.waitWorkers = false;
  server_opts.timeout = std::chrono::seconds(30);
  auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server_opts);
  const auto port = server->getPort();

  std::vector<std::string> failures(kWorld);
  auto run_rank = [&](int rank) {
    try {
      c10d::TCPStoreOptions client_opts;
      client_opts.port = port;
      client_opts.isServer = false;
      client_opts.timeout = std::chrono::seconds(30);
      auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client_opts);
      ProcessGroupOptions options;
      options.timeout = std::chrono::seconds(30);
      auto pg = ProcessGroup::create(store, "probe", rank, kWorld, options);

      auto t = at::full({4}, static_cast<float>(rank + 1));
      wait_work(pg->all_reduce(t, Reduction::kSum), "all_reduce");
      if (!at::equal(t, at::full({4}, 3.0f))) failures[rank] += "all_reduce SUM wrong; ";

      auto a = at::full({4}, static_cast<float>(2 * (rank + 1)));
      wait_work(pg->all_reduce(a, Reduction::kAvg), "all_reduce avg");
      if (!at::equal(a, at::full({4}, 3.0f))) failures[rank] += "all_reduce AVG wrong; ";

      auto in = at::arange(3, at::kFloat) + 10 * rank;
      auto gathered = at::empty({3 * kWorld}, at::kFloat);
      wait_work(pg->all_gather(gathered, in), "all_gather");
      auto expect = at::cat({at::arange(3, at::kFloat), at::arange(3, at::kFloat) + 10});
      if (!at::equal(gathered, expect)) failures[rank] += "all_gather wrong; ";

      auto rs_in = at::arange(2 * kWorld, at::kFloat) * (rank + 1);
      auto rs_out = at::empty({2}, at::kFloat);
      wait_work(pg->reduce_scatter(rs_out, rs_in, Reduction::kSum), "reduce_scatter");
      auto rs_expect = (at::arange(2 * kWorld, at::kFloat) * 3).narrow(0, 2 * rank, 2);
      if (!at::equal(rs_out, rs_expect)) failures[rank] += "reduce_scatter wrong; ";
      pg->barrier();
    } catch (const std::exception& e) {
      failures[rank] += e.what();
    }
  };
  std::thread r0(run_rank, 0), r1(run_rank, 1);
  r0.join();
  r1.join();
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
}

}  // namespace
}  // namespace shardbench
