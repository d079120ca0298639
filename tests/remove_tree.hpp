// Removes a file or a folder tree, for test scratch folders. Not std::filesystem::remove_all:
// the libtorch.so of the torch wheel exports a broken copy of it that crashes binaries linked
// against libtorch. A symlink is removed, never followed.
#pragma once

#include <filesystem>

namespace shardbench::testing_util {

inline void remove_tree(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  if (!fs::exists(fs::symlink_status(p))) return;
  if (fs::is_directory(fs::symlink_status(p))) {
    for (const auto& entry : fs::directory_iterator(p)) remove_tree(entry.path());
  }
  fs::remove(p);
}

}  // namespace shardbench::testing_util
