// NVTX ranges in the `shardbench` domain: what Nsight Systems shows on the CPU timeline for each
// step (`training_step_{i}`, as Megatron-Bridge names it), each layer's forward and backward,
// each FSDP unit's all-gather and gradient reduction, each DDP bucket's reduction and the
// optimizer step. RAII ranges after llm.c's NvtxRange.
//
// Cost with no tool attached: the first NVTX call reads NVTX_INJECTION64_PATH once; after that a
// range checks one cached bool. Names are registered with the tool only when one is attached, so
// nothing is formatted or registered otherwise. Without the NVTX headers (no CUDA toolkit) every
// call here is an empty inline function.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#if __has_include(<nvtx3/nvtx3.hpp>)
#ifndef NVTX3_CPP_REQUIRE_EXPLICIT_VERSION
#define NVTX3_CPP_REQUIRE_EXPLICIT_VERSION
#endif
#include <nvtx3/nvtx3.hpp>
#define SHARDBENCH_HAVE_NVTX 1
#endif

namespace shardbench::nvtx {

// ARGB colours by kind of range, so that a timeline reads at a glance.
enum class Color : uint32_t {
  kStep = 0xFF76B900,
  kForward = 0xFF3F88C5,
  kBackward = 0xFFE09F3E,
  kComm = 0xFF9B5DE5,
  kWait = 0xFFD62828,
  kOptimizer = 0xFF2A9D8F,
};

#ifdef SHARDBENCH_HAVE_NVTX

inline constexpr bool kCompiledIn = true;

struct Domain {
  static constexpr const char* name{"shardbench"};
};

inline nvtxDomainHandle_t domain() { return nvtx3::v1::domain::get<Domain>(); }

// True when a tool (Nsight Systems, CUPTI, an injection library) attached at NVTX's first call:
// without one NVTX hands out null domain handles. Fixed for the life of the process.
inline bool enabled() {
  static const bool attached = domain() != nullptr;
  return attached;
}

// A range name, registered with the tool on its first push (the tool then sees a handle, not a
// string, on every later push).
class Label {
 public:
  Label() = default;
  Label(std::string text, Color color) : text_(std::move(text)), color_(color) {}
  Label(const Label&) = delete;
  Label& operator=(const Label&) = delete;

  const std::string& text() const { return text_; }
  Color color() const { return color_; }
  nvtxStringHandle_t handle() const {
    std::call_once(registered_,
                   [this] { handle_ = nvtxDomainRegisterStringA(domain(), text_.c_str()); });
    return handle_;
  }

 private:
  std::string text_;
  Color color_ = Color::kStep;
  mutable std::once_flag registered_;
  mutable nvtxStringHandle_t handle_ = nullptr;
};

// Labels `prefix + index` (`forward/layer_3`), each made on first use. Thread-safe: on GPU the
// engine's backward hooks run on autograd's device thread, and tests run ranks as threads.
class LabelTable {
 public:
  LabelTable(std::string prefix, Color color) : prefix_(std::move(prefix)), color_(color) {}

  const Label& operator[](int64_t index) const {
    if (!enabled() || index < 0) return none_;
    std::lock_guard<std::mutex> lock(mu_);
    while (static_cast<int64_t>(labels_.size()) <= index) {
      labels_.emplace_back(prefix_ + std::to_string(labels_.size()), color_);
    }
    return labels_[static_cast<size_t>(index)];
  }

 private:
  std::string prefix_;
  Color color_;
  Label none_;
  mutable std::mutex mu_;
  mutable std::deque<Label> labels_;  // a deque: growing it keeps handed-out references valid
};

namespace detail {
inline nvtxEventAttributes_t attributes(Color color) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = static_cast<uint32_t>(color);
  return a;
}
inline void push(const Label& label, const int64_t* payload) {
  nvtxEventAttributes_t a = attributes(label.color());
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = label.handle();
  if (payload) {
    a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    a.payload.llValue = *payload;
  }
  nvtxDomainRangePushEx(domain(), &a);
}
}  // namespace detail

// Opens a range that a later pop() on the same thread closes: for ranges whose ends are separate
// callbacks (a layer's backward starts and ends in two autograd nodes).
inline void push(const Label& label) {
  if (enabled()) detail::push(label, nullptr);
}
inline void push(const Label& label, int64_t payload) {
  if (enabled()) detail::push(label, &payload);
}
inline void pop() {
  if (enabled()) nvtxDomainRangePop(domain());
}

// A range from construction to destruction on this thread.
class Range {
 public:
  explicit Range(const Label& label) : active_(enabled()) {
    if (active_) detail::push(label, nullptr);
  }
  // `payload`: a number the timeline shows with the range (bytes of a collective, a micro-batch).
  Range(const Label& label, int64_t payload) : active_(enabled()) {
    if (active_) detail::push(label, &payload);
  }
  // A name used once or twice per run (not registered with the tool).
  Range(const std::string& text, Color color) : active_(enabled()) {
    if (!active_) return;
    nvtxEventAttributes_t a = detail::attributes(color);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text.c_str();
    nvtxDomainRangePushEx(domain(), &a);
  }
  ~Range() {
    if (active_) nvtxDomainRangePop(domain());
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  bool active_;
};

#else  // no NVTX headers: every range is a no-op

inline constexpr bool kCompiledIn = false;
inline bool enabled() { return false; }

class Label {
 public:
  Label() = default;
  Label(std::string, Color) {}
};
class LabelTable {
 public:
  LabelTable(std::string, Color) {}
  const Label& operator[](int64_t) const { return none_; }

 private:
  Label none_;
};
inline void push(const Label&) {}
inline void push(const Label&, int64_t) {}
inline void pop() {}
class Range {
 public:
  explicit Range(const Label&) {}
  Range(const Label&, int64_t) {}
  Range(const std::string&, Color) {}
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};

#endif

}  // namespace shardbench::nvtx
