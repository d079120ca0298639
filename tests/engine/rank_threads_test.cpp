// The in-process rank helper (tests/engine/rank_threads.hpp): it retries group creation only for
// the named gloo connect error, logs every retry, and gives up after kMeshConnectAttempts; the
// groups' short connect timeout does not shorten their collectives' timeout.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <torch/torch.h>

#include "tests/engine/rank_threads.hpp"

namespace shardbench {
namespace {

std::atomic<int> g_factory_calls{0};
std::atomic<int> g_fn_calls{0};

// Sets SHARDBENCH_TEST_RETRY_LOG to a fresh file for one test and restores it after.
class RetryLog {
 public:
  RetryLog() : path_(std::filesystem::temp_directory_path() /
                     ("shardbench-retry-log-" + std::to_string(::getpid()) + ".txt")) {
    std::filesystem::remove(path_);
    if (const char* old = std::getenv("SHARDBENCH_TEST_RETRY_LOG")) old_ = old;
    setenv("SHARDBENCH_TEST_RETRY_LOG", path_.c_str(), 1);
  }
  ~RetryLog() {
    std::filesystem::remove(path_);
    if (old_.empty()) {
      unsetenv("SHARDBENCH_TEST_RETRY_LOG");
    } else {
      setenv("SHARDBENCH_TEST_RETRY_LOG", old_.c_str(), 1);
    }
  }
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::filesystem::path path_;
  std::string old_;
};

void all_reduce_ones(int /*rank*/, ProcessGroups& pgs) {
  auto t = torch::ones({4});
  pgs.world->all_reduce(t, Reduction::kSum)->wait();
  if (!t.eq(static_cast<double>(pgs.world->world())).all().item<bool>()) {
    throw std::runtime_error("all-reduce of ones gave " + std::to_string(t[0].item<double>()));
  }
  ++g_fn_calls;
}

TEST(RankThreads, NamedConnectFailureIsRetriedWithFreshGroupsAndLogged) {
  RetryLog log;
  g_factory_calls = 0;
  g_fn_calls = 0;
  testing::run_on_ranks_with(
      2, all_reduce_ones,
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, int attempt) {
        ++g_factory_calls;
        // Created first so that rank 0 is not left waiting for rank 1 in the rendezvous.
        auto groups = testing::create_gloo_groups(store, rank, world, attempt);
        if (attempt == 1 && rank == 1) {
          throw std::runtime_error(std::string(testing::kMeshConnectError) +
                                   " with [injected] Connection closed by peer");
        }
        return groups;
      });
  EXPECT_EQ(g_factory_calls.load(), 4);  // two ranks, two attempts
  EXPECT_EQ(g_fn_calls.load(), 2);       // the function ran once per rank, on the second attempt
  const std::string text = log.text();
  EXPECT_NE(text.find("RankThreads.NamedConnectFailureIsRetriedWithFreshGroupsAndLogged: gloo "
                      "group creation attempt 1 of 3 failed; retrying"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1: Gloo connectFullMesh failed with [injected]"), std::string::npos)
      << text;
}

void fail_other_error() {
  testing::run_on_ranks_with(
      2, all_reduce_ones,
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, int attempt) {
        ++g_factory_calls;
        auto groups = testing::create_gloo_groups(store, rank, world, attempt);
        // Both ranks' groups are complete before rank 0 fails: its groups going away while
        // rank 1 still finished its mesh connect would fail rank 1 with the connect error (seen
        // once under load), which is retried by design.
        testing::store_barrier(*store, "other_error/" + std::to_string(attempt), world);
        if (rank == 0) throw std::runtime_error("some other setup error");
        return groups;
      });
}

TEST(RankThreads, AnyOtherErrorFailsAtOnceWithoutRetry) {
  RetryLog log;
  g_factory_calls = 0;
  g_fn_calls = 0;
  EXPECT_NONFATAL_FAILURE(fail_other_error(), "some other setup error");
  EXPECT_EQ(g_factory_calls.load(), 2);
  EXPECT_EQ(g_fn_calls.load(), 0);
  EXPECT_EQ(log.text(), "");
}

void fail_every_attempt() {
  testing::run_on_ranks_with(
      2, all_reduce_ones,
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
         int attempt) -> ProcessGroups {
        ++g_factory_calls;
        auto groups = testing::create_gloo_groups(store, rank, world, attempt);
        if (rank == 0) {
          throw std::runtime_error(std::string(testing::kMeshConnectError) + " with [injected]");
        }
        return groups;
      });
}

TEST(RankThreads, ConnectFailureOnEveryAttemptFailsAfterTheLast) {
  RetryLog log;
  g_factory_calls = 0;
  g_fn_calls = 0;
  EXPECT_NONFATAL_FAILURE(fail_every_attempt(), "attempt 3");
  EXPECT_EQ(g_factory_calls.load(), 2 * testing::kMeshConnectAttempts);
  EXPECT_EQ(g_fn_calls.load(), 0);
  const std::string text = log.text();
  EXPECT_NE(text.find("attempt 1 of 3 failed"), std::string::npos) << text;
  EXPECT_NE(text.find("attempt 2 of 3 failed"), std::string::npos) << text;
  EXPECT_EQ(text.find("attempt 3 of 3 failed"), std::string::npos) << text;
}

// A group created with a one-second connect timeout still waits the full collective timeout in
// a collective: a rank that arrives 3 s late is waited for.
TEST(RankThreads, ShortConnectTimeoutDoesNotShortenCollectives) {
  g_fn_calls = 0;
  testing::run_on_ranks_with(
      2,
      [](int rank, ProcessGroups& pgs) {
        if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
        all_reduce_ones(rank, pgs);
      },
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, int attempt) {
        ProcessGroupOptions po;
        po.timeout = std::chrono::seconds(60);
        po.connect_timeout = std::chrono::seconds(1);
        const std::string tag = "short" + std::to_string(attempt) + "/";
        ProcessGroups pgs;
        testing::store_barrier(*store, tag + "barrier", world);
        pgs.world = ProcessGroup::create(store, tag + "world", rank, world, po);
        return pgs;
      });
  EXPECT_EQ(g_fn_calls.load(), 2);
}

}  // namespace
}  // namespace shardbench
