// Writes a whole file or nothing: readers (CI, compare tools) never see a half-written report.
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

namespace detail {
// Test seam: the rename step, so a test can make it fail after the temp file is complete.
using RenameFn = int (*)(const char* from, const char* to);
void write_file_atomically(const std::filesystem::path& path, std::string_view contents,
                           RenameFn rename_fn, ExistingFile existing = ExistingFile::kReplace);
}  // namespace detail

}  // namespace shardbench
