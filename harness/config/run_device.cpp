#include "harness/config/run_device.hpp"

#include <stdexcept>

#include "harness/enum_names.hpp"

namespace shardbench {

namespace {

constexpr EnumName<DeviceChoice> kDevices[] = {
    {DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}};
constexpr EnumName<BackendChoice> kBackends[] = {
    {BackendChoice::kAuto, "auto"}, {BackendChoice::kNccl, "nccl"}, {BackendChoice::kGloo, "gloo"}};
constexpr EnumName<ComputeDtype> kComputeDtypes[] = {{ComputeDtype::kBf16, "bf16"},
                                                     {ComputeDtype::kFp32, "fp32"}};

// The enum `names` gives `value` of `field`; std::invalid_argument naming the field otherwise.
template <class Enum, std::size_t N>
Enum parse(const EnumName<Enum> (&names)[N], const char* field, const std::string& value) {
  if (const auto parsed = enum_of(names, value)) return *parsed;
  throw std::invalid_argument(std::string(field) + "=" + value +
                              ": accepted: " + enum_names_text(names));
}

}  // namespace

DeviceChoice device_choice(const ShardbenchConfig& s) {
  return parse(kDevices, "shardbench.device", s.device);
}

BackendChoice backend_choice(const ShardbenchConfig& s) {
  return parse(kBackends, "shardbench.backend", s.backend);
}

ComputeDtype compute_dtype_of(const ShardbenchConfig& s) {
  return parse(kComputeDtypes, "shardbench.compute_dtype", s.compute_dtype);
}

std::string run_backend_of(const ShardbenchConfig& s) {
  const BackendChoice backend = backend_choice(s);
  if (backend != BackendChoice::kAuto) return enum_name(kBackends, backend);
  return is_cpu_run(s) ? "gloo" : "";
}

}  // namespace shardbench
