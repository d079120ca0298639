// What perf-launch checks before any worker starts: fault drills that can never fire, the
// rendezvous address from MASTER_ADDR/MASTER_PORT, and every output location.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "harness/config/errors.hpp"
#include "harness/launch/fault_spec.hpp"
#include "harness/launch/output_probe.hpp"
#include "harness/launch/rendezvous.hpp"
#include "tests/launch/test_helpers.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using launch_test::HasSubstr;

template <typename Fn>
std::string usage_error(Fn&& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchFaultSpec, AcceptsDrillsThatFire) {
  const FaultSpec kill = check_fault_spec("kill:1:3", 2, 50);
  EXPECT_EQ(kill.kind, "kill");
  EXPECT_EQ(kill.rank, 1);
  EXPECT_EQ(kill.step, 3);
  EXPECT_EQ(check_fault_spec("hang:0:50", 2, 50).kind, "hang");
}

TEST(LaunchFaultSpec, OutOfMemoryDrillNamesAMicroBatchAndARunPrefix) {
  const FaultSpec oom = check_fault_spec("oom:1:2:ddp", 2, 50);
  EXPECT_EQ(oom.kind, "oom");
  EXPECT_EQ(oom.rank, 1);
  EXPECT_EQ(oom.micro_batch, 2);
  EXPECT_EQ(oom.label_prefix, "ddp");
  EXPECT_EQ(check_fault_spec("oom:0:64", 2, 50).label_prefix, "");  // no step bound applies
  EXPECT_TRUE(HasSubstr(usage_error([] { check_fault_spec("oom:0:0", 2, 50); }),
                        "accepted: oom:<rank>:<micro_batch>[:<run label prefix>] with "
                        "<micro_batch> >= 1"));
  for (const char* bad : {"oom:2:2", "oom:0", "oom:0:2:ddp:x", "kill:0:2:ddp"}) {
    EXPECT_TRUE(HasSubstr(usage_error([&] { check_fault_spec(bad, 2, 50); }), "SHARDBENCH_FAULT"))
        << bad;
  }
}

TEST(LaunchFaultSpec, RefusesDrillsThatCanNeverFire) {
  EXPECT_TRUE(HasSubstr(usage_error([] { check_fault_spec("kill:7:3", 2, 50); }),
                        "SHARDBENCH_FAULT=\"kill:7:3\" is invalid; accepted: kill:<rank>:<step> "
                        "or hang:<rank>:<step> with <rank> in [0, 2)"));
  EXPECT_TRUE(HasSubstr(usage_error([] { check_fault_spec("kill:1:999", 2, 50); }),
                        "<step> in [1, 50] (train.train_iters)"));
  for (const char* bad :
       {"kill:1:0", "kill:-1:3", "boom:1:3", "kill:1", "kill:1:3:4", "kill:1:3x", "", "kill::3"}) {
    EXPECT_TRUE(HasSubstr(usage_error([&] { check_fault_spec(bad, 2, 50); }), "SHARDBENCH_FAULT"))
        << bad;
  }
}

TEST(LaunchRendezvous, UnsetPicksLoopbackAndAFreePortLater) {
  const RendezvousAddress r = local_rendezvous({{"PATH", "/bin"}});
  EXPECT_EQ(r.addr, "127.0.0.1");
  EXPECT_EQ(r.port, 0);
}

TEST(LaunchRendezvous, RefusesPortsThatAreNotPorts) {
  for (const char* bad : {"notaport", "70000", "0", "-1", "", "29500 "}) {
    EXPECT_TRUE(HasSubstr(
        usage_error([&] {
          local_rendezvous({{"MASTER_PORT", bad}});
        }),
        "MASTER_PORT=\"" + std::string(bad) + "\" is invalid; accepted: a TCP port in [1, 65535]"))
        << bad;
  }
  EXPECT_TRUE(HasSubstr(usage_error([] {
                          local_rendezvous({{"MASTER_ADDR", ""}});
                        }),
                        "MASTER_ADDR=\"\" is invalid"));
}

TEST(LaunchRendezvous, HonoursAFreePortAndRefusesABusyOne) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string busy = std::to_string(ntohs(addr.sin_port));
  EXPECT_TRUE(HasSubstr(
      usage_error([&] {
        local_rendezvous({{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", busy}});
      }),
      "MASTER_PORT=\"" + busy + "\" is invalid; accepted: a port that is free on 127.0.0.1"));
  ::close(fd);
  const RendezvousAddress r = local_rendezvous({{"MASTER_PORT", busy}});  // free again
  EXPECT_EQ(r.port, std::stoi(busy));
  EXPECT_EQ(r.addr, "127.0.0.1");
}

TEST(LaunchRendezvous, RefusesAnAddressOfAnotherHost) {
  // TEST-NET-3 (RFC 5737): never an address of this machine.
  EXPECT_TRUE(
      HasSubstr(usage_error([] {
                  local_rendezvous({{"MASTER_ADDR", "203.0.113.7"}});
                }),
                "MASTER_ADDR=\"203.0.113.7\" is invalid; accepted: an address of this host"));
}

class LaunchOutputProbe : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardbench-probe-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LaunchOutputProbe, ReportPathMustBeARegularFileOrAbsent) {
  ConfigContainer c;
  c.shardbench.report_path = (dir_ / "new" / "r.json").string();
  EXPECT_NO_THROW(probe_outputs(c));
  EXPECT_TRUE(fs::is_directory(dir_ / "new"));  // created up front, as the run would
  EXPECT_FALSE(fs::exists(dir_ / "new" / "r.json"));

  const fs::path fifo = dir_ / "null";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  c.shardbench.report_path = fifo.string();
  EXPECT_TRUE(HasSubstr(usage_error([&] { probe_outputs(c); }),
                        "shardbench.report_path=" + fifo.string() + " is not a regular file"));
  EXPECT_TRUE(fs::is_fifo(fifo));

  c.shardbench.report_path = dir_.string();
  EXPECT_TRUE(HasSubstr(usage_error([&] { probe_outputs(c); }), "is a directory"));
}

TEST_F(LaunchOutputProbe, MissingParentThatCannotBeCreatedIsRefused) {
  std::ofstream(dir_ / "plain") << "x";
  ConfigContainer c;
  c.shardbench.report_dir = (dir_ / "plain" / "reports").string();
  EXPECT_TRUE(HasSubstr(
      usage_error([&] { probe_outputs(c); }),
      "shardbench.report_dir=" + (dir_ / "plain" / "reports").string() + " cannot be created"));
  c.shardbench.report_dir = dir_.string();
  c.checkpoint.save = (dir_ / "plain" / "ckpt").string();
  EXPECT_TRUE(HasSubstr(usage_error([&] { probe_outputs(c); }), "checkpoint.save (--save_dir)"));
  c.checkpoint.save = (dir_ / "plain").string();
  EXPECT_TRUE(HasSubstr(usage_error([&] { probe_outputs(c); }), "is not a folder"));
}

TEST_F(LaunchOutputProbe, ReadOnlyFolderIsRefused) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to read-only folders";
  fs::create_directories(dir_ / "ro");
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  ConfigContainer c;
  c.shardbench.report_dir = (dir_ / "ro").string();
  EXPECT_TRUE(HasSubstr(usage_error([&] { probe_outputs(c); }), "is not writable"));
  fs::permissions(dir_ / "ro", fs::perms::owner_all);
}

TEST_F(LaunchOutputProbe, FreeSpaceIsCheckedAgainstTheExpectedSize) {
  EXPECT_NO_THROW(probe_output_folder("checkpoint.save", dir_, 1));
  EXPECT_TRUE(HasSubstr(
      usage_error([&] { probe_output_folder("checkpoint.save", dir_, int64_t{1} << 62); }),
      "free, the run writes about"));
}

TEST_F(LaunchOutputProbe, LoadDirMustBeAFolder) {
  std::ofstream(dir_ / "ckpt.bin") << "x";
  ConfigContainer c;
  c.shardbench.report_dir = dir_.string();
  c.checkpoint.load = (dir_ / "ckpt.bin").string();
  EXPECT_TRUE(HasSubstr(
      usage_error([&] { probe_outputs(c); }),
      "checkpoint.load (--load_dir)=" + (dir_ / "ckpt.bin").string() + " is not a folder"));
  c.checkpoint.load = (dir_ / "absent").string();  // Megatron: no checkpoint, start from scratch
  EXPECT_NO_THROW(probe_outputs(c));
}

TEST(LaunchOutputProbeSize, CheckpointLowerBoundCountsTwelveBytesPerParameter) {
  ConfigContainer c;
  c.model.num_layers = 1;
  c.model.hidden_size = 4;
  c.model.num_attention_heads = 2;
  c.model.ffn_hidden_size = 8;
  c.model.vocab_size = 10;
  // embedding 40 + head 40 + final norm 4 + layer (q 16, k 16, v 16, o 16, mlp 3*32, norms 8) 168
  EXPECT_EQ(checkpoint_bytes_lower_bound(c), (40 + 40 + 4 + 168) * 12);
}

}  // namespace
}  // namespace shardbench
