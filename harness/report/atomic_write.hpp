// Writes a whole file or nothing: readers (CI, compare tools) never see a half-written report.
#pragma once

#include <filesystem>
#include <string_view>

namespace shardbench {

// Writes `contents` to `<path>.tmp.<pid>` in the same folder, fsyncs it, renames it over
// `path` and fsyncs the folder. Creates missing parent folders. On any error the temporary file
// is removed, `path` is left as it was, and std::runtime_error names the path, the failing step
// and the errno text.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

namespace detail {
// Test seam: the rename step, so a test can make it fail after the temp file is complete.
using RenameFn = int (*)(const char* from, const char* to);
void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           RenameFn rename_fn);
}  // namespace detail

}  // namespace shardbench
