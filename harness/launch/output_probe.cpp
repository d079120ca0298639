#include "harness/launch/output_probe.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "harness/config/errors.hpp"
#include "harness/measure/flops.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;

// Reports are small; this is what a report with long per-step series needs at most.
constexpr int64_t kReportBytes = 16 << 20;

[[noreturn]] void reject(const std::string& field, const fs::path& path, const std::string& why,
                         const std::string& accepted) {
  throw UsageError(field + "=" + path.string() + " " + why + "; accepted: " + accepted);
}

std::string mib(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

void probe_output_folder(const std::string& field, const fs::path& dir, int64_t needed_bytes) {
  const std::string accepted = "a folder this user can write, on a file system with space";
  std::error_code ec;
  const fs::path where = dir.empty() ? fs::path(".") : dir;
  struct stat existing {};
  if (::stat(where.c_str(), &existing) == 0 && !S_ISDIR(existing.st_mode)) {
    reject(field, dir, "is not a folder", accepted);
  }
  fs::create_directories(where, ec);
  if (ec) reject(field, dir, "cannot be created (" + ec.message() + ")", accepted);
  struct stat st {};
  if (::stat(where.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    reject(field, dir, "is not a folder", accepted);
  }
  const fs::path probe =
      where / (".shardbench-probe-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    reject(field, dir, "is not writable (" + std::string(std::strerror(errno)) + ")", accepted);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs vfs {};
  if (needed_bytes > 0 && ::statvfs(where.c_str(), &vfs) == 0) {
    const auto free_bytes = static_cast<long double>(vfs.f_bavail) * vfs.f_frsize;
    if (free_bytes < static_cast<long double>(needed_bytes)) {
      reject(field, dir,
             "has " + mib(static_cast<int64_t>(free_bytes)) + " free, the run writes about " +
                 mib(needed_bytes),
             accepted);
    }
  }
}

void probe_output_file(const std::string& field, const fs::path& file, int64_t needed_bytes) {
  const std::string accepted =
      "a regular file or a path that does not exist yet, in a writable "
      "folder";
  if (file.filename().empty() || file.filename() == "." || file.filename() == "..") {
    reject(field, file, "names no file", accepted);
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) reject(field, file, "is a directory", accepted);
    if (!S_ISREG(st.st_mode)) {
      reject(field, file, "is not a regular file (a device, FIFO or socket)", accepted);
    }
  }
  probe_output_folder(field + " (its folder)", file.has_parent_path() ? file.parent_path() : ".",
                      needed_bytes);
}

int64_t checkpoint_bytes_lower_bound(const ConfigContainer& c) {
  const auto& m = c.model;
  if (m.num_attention_heads <= 0 || m.hidden_size <= 0) return 0;
  DecoderDims dims = decoder_dims_of(m);
  dims.vocab_size = m.vocab_size.value_or(0);  // a lower bound: the vocabulary before padding
  return decoder_param_counts(dims).total() * 12;
}

void probe_outputs(const ConfigContainer& c) {
  if (c.shardbench.report_path) {
    probe_output_file("shardbench.report_path", *c.shardbench.report_path, kReportBytes);
  } else {
    probe_output_folder("shardbench.report_dir", c.shardbench.report_dir, kReportBytes);
  }
  if (c.checkpoint.save) {
    probe_output_folder("checkpoint.save (--save_dir)", *c.checkpoint.save,
                        checkpoint_bytes_lower_bound(c));
  }
  if (c.checkpoint.load) {
    struct stat st {};
    if (::stat(c.checkpoint.load->c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      reject("checkpoint.load (--load_dir)", *c.checkpoint.load, "is not a folder",
             "a checkpoint folder (with latest_checkpointed_iteration.txt), or a folder without "
             "one to start from scratch");
    }
  }
  // The PyTorch profiler's traces go to logger.tensorboard_dir, else next to the report.
  if (c.profiling.use_pytorch_profiler && c.logger.tensorboard_dir) {
    probe_output_folder("logger.tensorboard_dir", *c.logger.tensorboard_dir, kReportBytes);
  }
}

}  // namespace shardbench
