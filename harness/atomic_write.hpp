// Writes a whole file or nothing: readers (CI, compare tools, a resumed run) never see a
// half-written report, trace or checkpoint shard.
#pragma once

#include <filesystem>
#include <string_view>

namespace shardbench {

// What may be at `path` already: a regular file that is replaced, or nothing (kRefuse: an
// existing file is an error, so a report is never overwritten).
enum class ExistingFile { kReplace, kRefuse };

// Writes `contents` to `<path>.tmp.<pid>` in the same folder, fsyncs it, renames it over
// `path` (kRefuse: links it to `path`, which fails if anything is there) and fsyncs the folder.
// Creates missing parent folders. `path` must be a regular file or absent: a rename would
// replace a device node, FIFO or socket (/dev/null as root) with a regular file. On any error
// the temporary file is removed, `path` is left as it was, and std::runtime_error names the
// path, the failing step and the errno text.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           ExistingFile existing = ExistingFile::kReplace);

// A file written under a temporary name until it is complete: opened for writing (created or
// truncated, mode 0644) on construction; on destruction closed and, unless release()d, removed.
// The whole-file writer below and checkpoint shards (harness/parallel/checkpoint_file.cpp) use it.
class TempFile {
 public:
  explicit TempFile(std::filesystem::path path);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  // < 0: the open failed and open_errno() says why; nothing is removed then.
  int fd() const { return fd_; }
  int open_errno() const { return open_errno_; }
  const std::filesystem::path& path() const { return path_; }
  // Closes the descriptor now; ::close's return value (errno set on failure).
  int close();
  // Keeps the file (after it was renamed into place).
  void release() { armed_ = false; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int open_errno_ = 0;
  bool armed_ = false;
};

namespace detail {
// Test seam: the rename step, so a test can make it fail after the temp file is complete.
using RenameFn = int (*)(const char* from, const char* to);
void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           RenameFn rename_fn, ExistingFile existing = ExistingFile::kReplace);
}  // namespace detail

}  // namespace shardbench
