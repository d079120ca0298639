// The binaries the tests start (perf-launch, perf-project, the NVTX recorder, the fake worker).
// Their paths depend on the build folder, so they live in one source generated per test binary
// (shardbench_test_paths in tests/CMakeLists.txt) instead of compile definitions: every other test
// source then compiles to the same command line in any clone, and ccache reuses it
// (docs/development.md, "Build times"). A binary that does not run one of them does not define it.
#pragma once

namespace shardbench::test_paths {

const char* perf_launch();
const char* perf_project();
const char* nvtx_recorder();
const char* fake_worker();

}  // namespace shardbench::test_paths

#define SHARDBENCH_PERF_LAUNCH (::shardbench::test_paths::perf_launch())
#define SHARDBENCH_PERF_PROJECT (::shardbench::test_paths::perf_project())
#define SHARDBENCH_NVTX_RECORDER (::shardbench::test_paths::nvtx_recorder())
#define SHARDBENCH_FAKE_WORKER (::shardbench::test_paths::fake_worker())
