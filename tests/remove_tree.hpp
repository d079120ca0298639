// Removes a file or a folder tree, for test scratch folders. Not std::filesystem::remove_all:
// the libtorch.so of the torch wheel exports a broken copy of it that crashes binaries linked
// against libtorch. A symlink is removed, never followed.
#pragma once

#include <filesystem>
#include <string>

#include <unistd.h>

namespace shardbench::testing_util {

inline void remove_tree(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  if (!fs::exists(fs::symlink_status(p))) return;
  if (fs::is_directory(fs::symlink_status(p))) {
    for (const auto& entry : fs::directory_iterator(p)) remove_tree(entry.path());
  }
  fs::remove(p);
}

// A test's scratch folder, <temp>/<prefix>_<pid>_<name>, removed before and after.
class ScratchDir {
 public:
  ScratchDir(const std::string& prefix, const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              (prefix + "_" + std::to_string(getpid()) + "_" + name)) {
    remove_tree(path_);
  }
  ~ScratchDir() { remove_tree(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace shardbench::testing_util
