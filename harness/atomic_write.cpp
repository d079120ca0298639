#include "harness/atomic_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace shardbench {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& step, int err) {
  throw std::runtime_error("cannot write " + path.string() + ": " + step + ": " +
                           std::strerror(err));
}

void write_all(int fd, std::string_view contents, const std::filesystem::path& path,
               const std::filesystem::path& tmp) {
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      fail(path, "write " + tmp.string(), err);
    }
    done += static_cast<std::size_t>(n);
  }
}

// Makes the rename itself durable; a failure here does not undo a completed rename, so it is
// ignored (some file systems refuse fsync on directories).
void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

TempFile::TempFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  open_errno_ = fd_ < 0 ? errno : 0;
  armed_ = fd_ >= 0;
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (armed_) ::unlink(path_.c_str());
}

int TempFile::close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

namespace detail {

// A hard link never replaces an existing name: the no-clobber counterpart of rename().
int link_new(const char* from, const char* to) {
  if (::link(from, to) != 0) return -1;
  ::unlink(from);
  return 0;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           RenameFn rename_fn, ExistingFile existing) {
  if (path.filename().empty()) fail(path, "path names no file", EINVAL);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      throw std::runtime_error("cannot write " + path.string() +
                               ": it is not a regular file (a folder, device, FIFO or socket); "
                               "accepted: a regular file or a path that does not exist");
    }
    if (existing == ExistingFile::kRefuse) fail(path, "refusing to replace it", EEXIST);
  }
  const std::filesystem::path dir =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(path, "create folder " + dir.string(), ec.value());

  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  TempFile file(tmp);
  if (file.fd() < 0) fail(path, "open " + tmp.string(), file.open_errno());
  write_all(file.fd(), contents, path, tmp);
  if (::fsync(file.fd()) != 0) {
    const int err = errno;
    fail(path, "fsync " + tmp.string(), err);
  }
  if (file.close() != 0) {
    const int err = errno;
    fail(path, "close " + tmp.string(), err);
  }
  if (existing == ExistingFile::kRefuse && rename_fn == &std::rename) rename_fn = &link_new;
  if (rename_fn(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fail(path, "rename " + tmp.string() + " -> " + path.string(), err);
  }
  file.release();
  fsync_directory(dir);
}

}  // namespace detail

void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           ExistingFile existing) {
  detail::write_file_atomically(path, contents, &std::rename, existing);
}

}  // namespace shardbench
