// An NVTX tool for tests: loaded through NVTX_INJECTION64_PATH, as Nsight Systems attaches, it
// records every range push and pop (domain, message with registered strings resolved, payload,
// nesting depth on its thread and domain) and writes them when the process exits to the file
// that SHARDBENCH_NVTX_RECORD names ("%r" becomes $RANK, "%p" the process id).
//
// Output, one event a line, tab-separated:
//   push <tid> <depth> <domain> <payload> <message>
//   pop  <tid> <depth> <domain>
// depth is the range's 0-based level (-1 for a pop without a push), domain "-" is NVTX's global
// domain, payload "-" means none.
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nvtx3/nvToolsExt.h>

namespace {

struct DomainRecord {
  std::string name;
};

struct Event {
  bool push = false;
  long tid = 0;
  int depth = 0;
  std::string domain;
  std::string payload;
  std::string message;
};

// Never destroyed: NVTX calls may still arrive from threads while the process exits.
struct Recorder {
  std::mutex mu;
  std::map<std::string, DomainRecord*> domains;
  std::deque<DomainRecord> domain_storage;
  std::deque<std::string> strings;  // registered strings; a handle is a pointer into this deque
  std::map<std::pair<long, const void*>, int> depth;  // (thread, domain) -> open ranges
  std::vector<Event> events;
};

Recorder& recorder() {
  static Recorder* r = new Recorder;
  return *r;
}

long thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

std::string clean(std::string s) {
  for (char& c : s) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::string domain_name(nvtxDomainHandle_t d) {
  return d ? reinterpret_cast<const DomainRecord*>(d)->name : std::string("-");
}

std::string message_of(const nvtxEventAttributes_t* a) {
  if (!a) return "";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii ? clean(a->message.ascii) : "";
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? *reinterpret_cast<const std::string*>(a->message.registered)
                                   : "<null registered string>";
    case NVTX_MESSAGE_TYPE_UNICODE:
      return "<unicode>";
    default:
      return "";
  }
}

std::string payload_of(const nvtxEventAttributes_t* a) {
  if (!a) return "-";
  switch (a->payloadType) {
    case NVTX_PAYLOAD_TYPE_INT64:
      return std::to_string(a->payload.llValue);
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
      return std::to_string(a->payload.ullValue);
    case NVTX_PAYLOAD_TYPE_INT32:
      return std::to_string(a->payload.iValue);
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32:
      return std::to_string(a->payload.uiValue);
    case NVTX_PAYLOAD_TYPE_DOUBLE:
      return std::to_string(a->payload.dValue);
    case NVTX_PAYLOAD_TYPE_FLOAT:
      return std::to_string(a->payload.fValue);
    default:
      return "-";
  }
}

int record_push(nvtxDomainHandle_t d, std::string message, std::string payload) {
  Recorder& r = recorder();
  const long tid = thread_id();
  std::lock_guard<std::mutex> lock(r.mu);
  int& open = r.depth[{tid, d}];
  r.events.push_back({true, tid, open, domain_name(d), std::move(payload), std::move(message)});
  return open++;
}

int record_pop(nvtxDomainHandle_t d) {
  Recorder& r = recorder();
  const long tid = thread_id();
  std::lock_guard<std::mutex> lock(r.mu);
  int& open = r.depth[{tid, d}];
  const int level = open > 0 ? --open : -1;
  r.events.push_back({false, tid, level, domain_name(d), "-", ""});
  return level;
}

void write_events() {
  const char* pattern = std::getenv("SHARDBENCH_NVTX_RECORD");
  if (!pattern || !*pattern) return;
  std::string path;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'r') {
      const char* rank = std::getenv("RANK");
      path += rank ? rank : "none";
      ++p;
    } else if (p[0] == '%' && p[1] == 'p') {
      path += std::to_string(::getpid());
      ++p;
    } else {
      path += *p;
    }
  }
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "nvtx_recorder: cannot write %s\n", path.c_str());
    return;
  }
  for (const Event& e : r.events) {
    if (e.push) {
      std::fprintf(f, "push\t%ld\t%d\t%s\t%s\t%s\n", e.tid, e.depth, e.domain.c_str(),
                   e.payload.c_str(), e.message.c_str());
    } else {
      std::fprintf(f, "pop\t%ld\t%d\t%s\n", e.tid, e.depth, e.domain.c_str());
    }
  }
  std::fclose(f);
}

// ---- NVTX callbacks --------------------------------------------------------------------------

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  const std::string key = name ? clean(name) : "";
  auto it = r.domains.find(key);
  if (it == r.domains.end()) {
    r.domain_storage.push_back({key});
    it = r.domains.emplace(key, &r.domain_storage.back()).first;
  }
  return reinterpret_cast<nvtxDomainHandle_t>(it->second);
}

nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t, const char* text) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.strings.push_back(text ? clean(text) : "");
  return reinterpret_cast<nvtxStringHandle_t>(&r.strings.back());
}

int NVTX_API domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return record_push(d, message_of(a), payload_of(a));
}
int NVTX_API domain_pop(nvtxDomainHandle_t d) { return record_pop(d); }
int NVTX_API global_push_ex(const nvtxEventAttributes_t* a) {
  return record_push(nullptr, message_of(a), payload_of(a));
}
int NVTX_API global_push_a(const char* message) {
  return record_push(nullptr, message ? clean(message) : "", "-");
}
int NVTX_API global_pop() { return record_pop(nullptr); }

template <typename Fn>
void install(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn) {
  if (table && id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

// Each shared object with its own copy of NVTX calls this once, with its own function tables:
// fill whichever tables are passed; the recorder's state is shared and set up once.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  static std::once_flag once;
  std::call_once(once, [] {
    recorder();
    std::atexit(write_events);
  });
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) {
    install(table, size, NVTX_CBID_CORE_RangePushEx, &global_push_ex);
    install(table, size, NVTX_CBID_CORE_RangePushA, &global_push_a);
    install(table, size, NVTX_CBID_CORE_RangePop, &global_pop);
  }
  table = nullptr;
  size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) {
    install(table, size, NVTX_CBID_CORE2_DomainCreateA, &domain_create);
    install(table, size, NVTX_CBID_CORE2_DomainRegisterStringA, &register_string);
    install(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_push);
    install(table, size, NVTX_CBID_CORE2_DomainRangePop, &domain_pop);
  }
  return 1;
}
