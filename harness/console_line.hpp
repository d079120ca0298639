// perf-launch's own lines on the terminal. The launcher and every rank share one terminal or pipe,
// and std::cerr writes each `<<` piece as it comes: a line built from pieces can be cut by another
// process's line ("perf-launch: perf-launch: rank 1 ... was killed" followed by the rest of the
// first). print_line hands the stream the whole line in one call.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace shardbench {

// Writes "perf-launch: <text>\n" to `os` in one piece, then flushes.
inline void print_line(std::ostream& os, std::string_view text) {
  std::string line;
  line.reserve(text.size() + 14);
  line.append("perf-launch: ").append(text).push_back('\n');
  os.write(line.data(), static_cast<std::streamsize>(line.size()));
  os.flush();
}

}  // namespace shardbench
