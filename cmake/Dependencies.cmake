# Locates every dependency. Torch comes from a pip wheel (see scripts/setup); the header-only
# packages come from Debian, or from SHARDBENCH_DEPS_DIR where apt is unavailable (GPU machine).

set(_sb_hint_dirs)
if(SHARDBENCH_DEPS_DIR)
  list(APPEND _sb_hint_dirs "${SHARDBENCH_DEPS_DIR}/usr/include")
endif()

find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp HINTS ${_sb_hint_dirs})
find_path(NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp HINTS ${_sb_hint_dirs})
find_path(GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${_sb_hint_dirs})
foreach(_dep CLI11_INCLUDE_DIR NLOHMANN_JSON_INCLUDE_DIR GLOO_INCLUDE_DIR)
  if(NOT ${_dep})
    message(FATAL_ERROR "shardbench: ${_dep} not found. Run scripts/setup (Debian packages "
                        "libcli11-dev, nlohmann-json3-dev, libgloo-dev) or pass "
                        "-DSHARDBENCH_DEPS_DIR=<folder with the unpacked .debs>.")
  endif()
endforeach()

# Torch: an explicit CMAKE_PREFIX_PATH / Torch_DIR wins; otherwise ask the Python that has torch.
if(NOT Torch_DIR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _sb_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_sb_torch_prefix)
      list(APPEND CMAKE_PREFIX_PATH "${_sb_torch_prefix}")
    endif()
  endif()
endif()
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  # Hopper (H100/H200). Torch resets CMAKE_CUDA_ARCHITECTURES; it reads this instead.
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for torch's CUDA flags")
endif()
find_package(Torch REQUIRED)
message(STATUS "shardbench: Torch ${Torch_VERSION} from ${Torch_DIR}")

# nccl.h must be the exact one torch was built with (class layouts depend on its macros): it sits
# in the same site-packages as torch, under nvidia/nccl/include.
get_filename_component(_sb_site_packages "${Torch_DIR}/../../../.." ABSOLUTE)
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS "${_sb_site_packages}/nvidia/nccl/include" NO_DEFAULT_PATH)
if(NOT NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "shardbench: nccl.h not found next to torch (${_sb_site_packages}/nvidia/"
                      "nccl/include). Pass -DNCCL_INCLUDE_DIR=<dir> with torch's own NCCL headers.")
endif()
find_path(NVTX_INCLUDE_DIR nvtx3/nvtx3.hpp
  HINTS "${CUDAToolkit_INCLUDE_DIRS}" /usr/local/cuda/include "${_sb_site_packages}/nvidia/cu13/include")
if(NOT NVTX_INCLUDE_DIR)
  message(FATAL_ERROR "shardbench: nvtx3/nvtx3.hpp not found (CUDA toolkit include folder).")
endif()
