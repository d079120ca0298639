#include "harness/parallel/checkpoint_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "harness/atomic_write.hpp"

namespace shardbench {
namespace {

constexpr char kMagic[8] = {'S', 'B', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kEndMagic[8] = {'S', 'B', 'C', 'K', 'E', 'N', 'D', '1'};
// A header describes a few hundred tensors; anything larger is a damaged length field.
constexpr uint64_t kMaxHeaderBytes = 64ull << 20;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("checkpoint shard " + path.string() + ": " + what);
}

[[noreturn]] void fail_errno(const std::filesystem::path& path, const std::string& step) {
  fail(path, step + ": " + std::strerror(errno));
}

// FNV-1a over 64-bit words (then the tail bytes and the length): a change of any one word
// changes the sum, at a multiply per 8 bytes.
class Checksum {
 public:
  void update(const unsigned char* p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h_ = (h_ ^ w) * kPrime;
    }
    for (; i < n; ++i) h_ = (h_ ^ p[i]) * kPrime;
    length_ += n;
  }
  uint64_t value() const { return (h_ ^ length_) * kPrime; }

 private:
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h_ = 14695981039346656037ull;
  uint64_t length_ = 0;
};

}  // namespace

const char* checkpoint_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kDouble:
      return "float64";
    case at::kByte:  // a generator's state
      return "uint8";
    default:
      throw std::invalid_argument(std::string("checkpoint: tensors of dtype ") + c10::toString(t) +
                                  " are not supported; accepted: float32, bfloat16, float16, "
                                  "float64, uint8");
  }
}

namespace {

void write_all(int fd, const void* data, size_t n, const std::filesystem::path& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "write");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Reads exactly n bytes; false at a premature end of file.
bool read_all(int fd, void* data, size_t n, const std::filesystem::path& path) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "read");
    }
    if (r == 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

class ReadFd {
 public:
  explicit ReadFd(const std::filesystem::path& path)
      : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~ReadFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

int64_t write_shard_file(const std::filesystem::path& path, const std::vector<ShardTensor>& tensors,
                         const nlohmann::json& header_extra, const ShardProgress& progress) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& t : tensors) {
    entries.push_back(
        {{"name", t.name},
         {"dtype", checkpoint_dtype_name(t.tensor.scalar_type())},
         {"numel", t.tensor.numel()},
         {"nbytes", t.tensor.numel() * static_cast<int64_t>(t.tensor.element_size())}});
  }
  const std::string header = nlohmann::json{{"tensors", entries}, {"info", header_extra}}.dump();
  const uint64_t header_bytes = header.size();

  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  TempFile file(tmp);
  if (file.fd() < 0) {
    errno = file.open_errno();
    fail_errno(path, "create " + tmp.string());
  }
  write_all(file.fd(), kMagic, sizeof(kMagic), path);
  write_all(file.fd(), &header_bytes, sizeof(header_bytes), path);
  write_all(file.fd(), header.data(), header.size(), path);
  std::vector<uint64_t> sums;
  for (const auto& t : tensors) {
    // One host copy at a time bounds the host memory a save needs to the largest buffer.
    const at::Tensor host = t.tensor.detach().to(at::kCPU).contiguous();
    const size_t n = host.numel() * host.element_size();
    Checksum sum;
    sum.update(static_cast<const unsigned char*>(host.data_ptr()), n);
    sums.push_back(sum.value());
    write_all(file.fd(), host.data_ptr(), n, path);
    if (progress) progress(t.name);
  }
  write_all(file.fd(), sums.data(), sums.size() * sizeof(uint64_t), path);
  write_all(file.fd(), kEndMagic, sizeof(kEndMagic), path);
  if (::fsync(file.fd()) != 0) fail_errno(path, "fsync " + tmp.string());
  if (file.close() != 0) fail_errno(path, "close " + tmp.string());
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_errno(path, "rename " + tmp.string());
  file.release();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail_errno(path, "stat");
  return static_cast<int64_t>(st.st_size);
}

std::vector<at::Tensor> read_shard_file(const std::filesystem::path& path,
                                        const std::vector<ShardExpectation>& expected,
                                        nlohmann::json* header_extra,
                                        const ShardProgress& progress) {
  ReadFd fd(path);
  if (fd.get() < 0) fail_errno(path, "open");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail_errno(path, "stat");
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);

  char magic[8];
  uint64_t header_bytes = 0;
  if (!read_all(fd.get(), magic, sizeof(magic), path) ||
      std::memcmp(magic, kMagic, sizeof(magic)) != 0) {
    fail(path, "not a shardbench checkpoint shard (bad magic)");
  }
  if (!read_all(fd.get(), &header_bytes, sizeof(header_bytes), path) ||
      header_bytes > kMaxHeaderBytes || header_bytes > file_bytes) {
    fail(path, "damaged header length");
  }
  std::string header(header_bytes, '\0');
  if (!read_all(fd.get(), header.data(), header.size(), path)) fail(path, "truncated header");
  nlohmann::json head;
  try {
    head = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  const nlohmann::json& entries = head.value("tensors", nlohmann::json::array());
  if (!entries.is_array() || entries.size() != expected.size()) {
    fail(path, "holds " + std::to_string(entries.is_array() ? entries.size() : 0) +
                   " tensors, the layout needs " + std::to_string(expected.size()));
  }
  uint64_t data_bytes = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& e = expected[i];
    const auto& got = entries[i];
    const std::string name = got.value("name", "");
    const std::string dtype = got.value("dtype", "");
    const int64_t numel = got.value("numel", int64_t{-1});
    const int64_t nbytes = got.value("nbytes", int64_t{-1});
    const int64_t want_bytes = e.numel * static_cast<int64_t>(c10::elementSize(e.dtype));
    if (name != e.name || dtype != checkpoint_dtype_name(e.dtype) || numel != e.numel ||
        nbytes != want_bytes) {
      fail(path, "tensor " + std::to_string(i) + " is " + name + " (" + dtype + ", " +
                     std::to_string(numel) + " elements); the layout needs " + e.name + " (" +
                     checkpoint_dtype_name(e.dtype) + ", " + std::to_string(e.numel) +
                     " elements)");
    }
    data_bytes += static_cast<uint64_t>(nbytes);
  }
  const uint64_t want_bytes = sizeof(kMagic) + sizeof(uint64_t) + header_bytes + data_bytes +
                              expected.size() * sizeof(uint64_t) + sizeof(kEndMagic);
  if (file_bytes != want_bytes) {
    fail(path, "is " + std::to_string(file_bytes) + " bytes, its header describes " +
                   std::to_string(want_bytes) + " (" +
                   (file_bytes < want_bytes ? "truncated" : "trailing data") + ")");
  }
  std::vector<at::Tensor> out;
  std::vector<uint64_t> sums;
  for (const auto& e : expected) {
    at::Tensor t = at::empty({e.numel}, at::TensorOptions().dtype(e.dtype));
    const size_t n = t.numel() * t.element_size();
    if (!read_all(fd.get(), t.data_ptr(), n, path)) fail(path, "truncated while reading " + e.name);
    Checksum sum;
    sum.update(static_cast<const unsigned char*>(t.data_ptr()), n);
    sums.push_back(sum.value());
    out.push_back(std::move(t));
    if (progress) progress(e.name);
  }
  std::vector<uint64_t> stored(expected.size());
  char end[8];
  if (!read_all(fd.get(), stored.data(), stored.size() * sizeof(uint64_t), path) ||
      !read_all(fd.get(), end, sizeof(end), path) ||
      std::memcmp(end, kEndMagic, sizeof(end)) != 0) {
    fail(path, "damaged trailer");
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (stored[i] != sums[i])
      fail(path, "checksum mismatch in " + expected[i].name + " (corrupt data)");
  }
  if (header_extra) *header_extra = head.value("info", nlohmann::json());
  return out;
}

}  // namespace shardbench
