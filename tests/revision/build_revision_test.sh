#!/usr/bin/env bash
# A binary names the tree it was built from: clones this checkout into a temp folder, builds a
# small program with cmake/build_revision.cmake there (the build step every shardbench build
# runs), and checks what the program reports, clean and then with an uncommitted change:
# revision = the clone's HEAD, dirty flag, and the SHA-256 of `git diff HEAD --binary`.
#   build_revision_test.sh REPO CXX
set -euo pipefail
repo="$1" cxx="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

git clone -q --no-hardlinks "$repo" "$work/src"
git -C "$work/src" -c user.name=t -c user.email=t@t commit -q --allow-empty -m "test base"
base="$(git -C "$work/src" rev-parse HEAD)"

build_and_run() {  # the generated file is compiled into a fresh program each time
  cmake -DSOURCE_DIR="$work/src" -DOUTPUT="$work/build_revision.cpp" \
    -P "$repo/cmake/build_revision.cmake"
  "$cxx" -std=c++20 -I "$repo" "$work/build_revision.cpp" \
    "$repo/tests/revision/print_build_revision.cpp" -o "$work/print_build_revision"
  "$work/print_build_revision" > "$work/out.txt"
}
field() { awk -v k="$1" '$1 == k { print $2 }' "$work/out.txt"; }

build_and_run
[ "$(field revision)" = "$base" ] || fail "clean: revision $(field revision), expected $base"
[ "$(field dirty)" = false ] || fail "clean tree reported dirty"
[ -z "$(field diff_sha256)" ] || fail "clean tree has a diff hash $(field diff_sha256)"

echo "// uncommitted change" >> "$work/src/harness/version.cpp"
build_and_run
want_hash="$(git -C "$work/src" diff HEAD --binary | sha256sum | cut -d' ' -f1)"
[ "$(field revision)" = "$base" ] || fail "dirty: revision $(field revision), expected $base"
[ "$(field dirty)" = true ] || fail "a tree with an uncommitted change reported clean"
[ "$(field diff_sha256)" = "$want_hash" ] || fail "diff hash $(field diff_sha256), expected $want_hash"

echo "// another change" >> "$work/src/harness/version.cpp"
build_and_run
[ "$(field diff_sha256)" != "$want_hash" ] || fail "a different diff kept the same hash"
echo "build revision: ok (base $base)"
