#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "harness/atomic_write.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

class ReportAtomicWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("shardbench_atomic_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Entries of `dir` other than `keep`.
  static int others(const fs::path& dir, const fs::path& keep) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path() != keep ? 1 : 0;
    return n;
  }

  fs::path dir_;
};

TEST_F(ReportAtomicWrite, CreatesParentsAndLeavesNoTempFile) {
  const fs::path target = dir_ / "a" / "b" / "report.json";
  write_file_atomically(target, "{\"x\": 1}\n");
  EXPECT_EQ(read(target), "{\"x\": 1}\n");
  EXPECT_EQ(others(target.parent_path(), target), 0);
}

TEST_F(ReportAtomicWrite, ReplacesExistingFile) {
  const fs::path target = dir_ / "report.json";
  write_file_atomically(target, "old");
  write_file_atomically(target, "new contents");
  EXPECT_EQ(read(target), "new contents");
  EXPECT_EQ(others(dir_, target), 0);
}

int failing_rename(const char*, const char*) {
  errno = EXDEV;
  return -1;
}

TEST_F(ReportAtomicWrite, FailedRenameLeavesTargetUntouchedAndRemovesTemp) {
  const fs::path target = dir_ / "report.json";
  write_file_atomically(target, "previous report");
  try {
    detail::write_file_atomically(target, "half-baked", &failing_rename);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(target.string()), std::string::npos) << message;
    EXPECT_NE(message.find("rename"), std::string::npos) << message;
    EXPECT_NE(message.find(std::strerror(EXDEV)), std::string::npos) << message;
  }
  EXPECT_EQ(read(target), "previous report");
  EXPECT_EQ(others(dir_, target), 0);
}

TEST_F(ReportAtomicWrite, RealRenameFailureOntoDirectory) {
  // A non-empty directory where the file should go: rename(2) fails with EISDIR.
  const fs::path target = dir_ / "report.json";
  fs::create_directories(target / "inside");
  EXPECT_THROW(write_file_atomically(target, "x"), std::runtime_error);
  EXPECT_TRUE(fs::is_directory(target / "inside"));
  EXPECT_EQ(others(dir_, target), 0);
}

TEST_F(ReportAtomicWrite, ParentIsAFile) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "plain") << "x";
  try {
    write_file_atomically(dir_ / "plain" / "report.json", "x");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("plain/report.json"), std::string::npos) << e.what();
  }
}

// /dev/null as root: a rename would have replaced the device node with a regular file. A FIFO
// in a temp folder stands in for it (mknod needs root; mkfifo does not).
TEST_F(ReportAtomicWrite, RefusesANonRegularTargetAndLeavesItIntact) {
  fs::create_directories(dir_);
  const fs::path fifo = dir_ / "null";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  try {
    write_file_atomically(fifo, "x");
    FAIL() << "a FIFO target was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(others(dir_, fifo), 0);
  // A symlink to it is refused too (the rename would replace the link, the check follows it).
  const fs::path link = dir_ / "link";
  fs::create_symlink(fifo, link);
  EXPECT_THROW(write_file_atomically(link, "x"), std::runtime_error);
  EXPECT_TRUE(fs::is_symlink(link));
}

TEST_F(ReportAtomicWrite, RefuseModeNeverReplacesAFile) {
  const fs::path target = dir_ / "report.json";
  write_file_atomically(target, "first", ExistingFile::kRefuse);
  EXPECT_EQ(read(target), "first");
  EXPECT_THROW(write_file_atomically(target, "second", ExistingFile::kRefuse), std::runtime_error);
  EXPECT_EQ(read(target), "first");
  EXPECT_EQ(others(dir_, target), 0);  // no temp file left behind
}

}  // namespace
}  // namespace shardbench
