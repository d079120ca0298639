#include "harness/launch/slurm_hostlist.hpp"

#include <charconv>
#include <cstddef>
#include <stdexcept>

namespace shardbench {
namespace {

// A job of a million nodes does not exist; a list that expands beyond it is a typo
// ("[1-999999999]").
constexpr std::size_t kMaxHosts = 1'000'000;

constexpr const char* kHostlistSyntax =
    "comma-separated names, each with optional [a-b,c] groups of decimal numbers, "
    "e.g. \"gpu-[01-03,07],cpu9\"";

[[noreturn]] void reject_hostlist(std::string_view hostlist, std::size_t pos,
                                  std::string_view why) {
  throw std::invalid_argument("Slurm host list \"" + std::string(hostlist) +
                              "\": " + std::string(why) + " at position " + std::to_string(pos) +
                              "; accepted: " + kHostlistSyntax);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

long long to_number(std::string_view digits) {
  long long value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size()) return -1;
  return value;
}

std::string padded(long long value, std::size_t width) {
  std::string s = std::to_string(value);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Calls `entry(text, offset)` for each comma-separated entry of `list`, empty ones included (an
// empty list is one empty entry); `offset` is where the entry starts in `list`.
template <class Entry>
void for_each_entry(std::string_view list, Entry&& entry) {
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    entry(list.substr(start, end - start), start);
    start = end + 1;
  }
}

// Expands the inside of one bracket group ("01-03,07") starting at `offset` in `hostlist`.
std::vector<std::string> expand_ranges(std::string_view hostlist, std::size_t offset,
                                       std::string_view ranges) {
  std::vector<std::string> out;
  for_each_entry(ranges, [&](std::string_view range, std::size_t start) {
    std::size_t dash = range.find('-');
    std::string_view lo = range.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : range.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) {
      reject_hostlist(hostlist, offset + start, "bad range \"" + std::string(range) + "\"");
    }
    long long lo_value = to_number(lo);
    long long hi_value = to_number(hi);
    if (lo_value < 0 || hi_value < lo_value) {
      reject_hostlist(hostlist, offset + start, "empty range \"" + std::string(range) + "\"");
    }
    if (static_cast<std::size_t>(hi_value - lo_value) + out.size() >= kMaxHosts) {
      reject_hostlist(hostlist, offset + start, "more than 1000000 hosts");
    }
    for (long long v = lo_value; v <= hi_value; ++v) out.push_back(padded(v, lo.size()));
  });
  return out;
}

// Expands one host expression without top-level commas ("r[1-2]n[01,03]").
void expand_item(std::string_view hostlist, std::size_t offset, std::string_view item,
                 std::vector<std::string>& hosts) {
  if (item.empty()) reject_hostlist(hostlist, offset, "empty host name");
  std::vector<std::string> prefixes{""};
  std::size_t pos = 0;
  while (pos < item.size()) {
    std::size_t open = item.find('[', pos);
    std::string_view text =
        item.substr(pos, open == std::string_view::npos ? item.npos : open - pos);
    if (text.find(']') != std::string_view::npos) {
      reject_hostlist(hostlist, offset + pos + text.find(']'), "unmatched ']'");
    }
    for (auto& prefix : prefixes) prefix += text;
    if (open == std::string_view::npos) break;
    std::size_t close = item.find(']', open);
    if (close == std::string_view::npos) reject_hostlist(hostlist, offset + open, "unmatched '['");
    std::vector<std::string> numbers =
        expand_ranges(hostlist, offset + open + 1, item.substr(open + 1, close - open - 1));
    if (prefixes.size() * numbers.size() > kMaxHosts) {
      reject_hostlist(hostlist, offset + open, "more than 1000000 hosts");
    }
    std::vector<std::string> next;
    next.reserve(prefixes.size() * numbers.size());
    for (const auto& prefix : prefixes) {
      for (const auto& number : numbers) next.push_back(prefix + number);
    }
    prefixes = std::move(next);
    pos = close + 1;
  }
  if (hosts.size() + prefixes.size() > kMaxHosts) {
    reject_hostlist(hostlist, offset, "more than 1000000 hosts");
  }
  hosts.insert(hosts.end(), prefixes.begin(), prefixes.end());
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view hostlist) {
  if (hostlist.empty()) reject_hostlist(hostlist, 0, "empty list");
  std::vector<std::string> hosts;
  std::size_t item_start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= hostlist.size(); ++i) {
    char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[') {
      if (++depth > 1) reject_hostlist(hostlist, i, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) reject_hostlist(hostlist, i, "unmatched ']'");
    } else if (c == ',' && depth == 0) {
      expand_item(hostlist, item_start, hostlist.substr(item_start, i - item_start), hosts);
      item_start = i + 1;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      reject_hostlist(hostlist, i, "whitespace");
    }
  }
  if (depth != 0) reject_hostlist(hostlist, hostlist.size(), "unmatched '['");
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view tasks_per_node) {
  auto reject = [&](std::string_view entry) {
    throw std::invalid_argument("SLURM_TASKS_PER_NODE=\"" + std::string(tasks_per_node) +
                                "\": bad entry \"" + std::string(entry) +
                                "\"; accepted: comma-separated counts, each optionally repeated "
                                "as N(xR), e.g. \"2(x3),1\"");
  };
  std::vector<int> counts;
  for_each_entry(tasks_per_node, [&](std::string_view entry, std::size_t) {
    std::size_t paren = entry.find('(');
    std::string_view count = entry.substr(0, paren);
    long long repeat = 1;
    if (paren != std::string_view::npos) {
      std::string_view rest = entry.substr(paren);
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')' ||
          !all_digits(rest.substr(2, rest.size() - 3))) {
        reject(entry);
      }
      repeat = to_number(rest.substr(2, rest.size() - 3));
    }
    long long value = all_digits(count) ? to_number(count) : -1;
    if (value < 1 || value > 1'000'000 || repeat < 1 ||
        counts.size() + static_cast<std::size_t>(repeat) > kMaxHosts) {
      reject(entry);
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(value));
  });
  return counts;
}

}  // namespace shardbench
