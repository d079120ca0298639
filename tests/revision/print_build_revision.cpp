// Prints the revision compiled into this binary (harness/version.hpp), one field per line, for
// tests/revision/build_revision_test.sh.
#include <iostream>

#include "harness/version.hpp"

int main() {
  const shardbench::BuildRevision& r = shardbench::build_revision();
  std::cout << "revision " << r.revision << "\n"
            << "dirty " << (r.dirty ? "true" : "false") << "\n"
            << "diff_sha256 " << r.diff_sha256 << "\n";
  return 0;
}
