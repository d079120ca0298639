// print_line (harness/console_line.hpp): a perf-launch line reaches the stream in one piece, so
// that the launcher's and the ranks' lines on a shared terminal or pipe do not cut each other.
#include "harness/console_line.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

namespace shardbench {
namespace {

// Records the pieces a stream hands its buffer: an unbuffered std::cerr passes each one to
// write(2) on its own.
class PieceRecorder : public std::streambuf {
 public:
  std::vector<std::string> pieces;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    pieces.emplace_back(s, static_cast<size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) pieces.emplace_back(1, traits_type::to_char_type(c));
    return c;
  }
};

TEST(ConsoleLine, WritesTheWholeLineInOnePiece) {
  PieceRecorder buf;
  std::ostream os(&buf);
  print_line(os, std::string("rank 0: ") + "barrier failed");
  ASSERT_EQ(buf.pieces.size(), 1u);
  EXPECT_EQ(buf.pieces[0], "perf-launch: rank 0: barrier failed\n");
}

}  // namespace
}  // namespace shardbench
