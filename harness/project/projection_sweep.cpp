#include "harness/project/projection_sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "harness/compare/svg_chart.hpp"
#include "harness/project/whole_number.hpp"

namespace shardbench {
namespace {

using nlohmann::json;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The (label, interconnect) series in the order they first appear.
std::vector<std::pair<std::string, std::string>> series_keys(const std::vector<SweepEntry>& es) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const SweepEntry& e : es) {
    const std::pair<std::string, std::string> k{e.label, e.interconnect};
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  return keys;
}

std::vector<SweepEntry> series_of(const std::vector<SweepEntry>& es,
                                  const std::pair<std::string, std::string>& key) {
  std::vector<SweepEntry> out;
  for (const SweepEntry& e : es) {
    if (e.label == key.first && e.interconnect == key.second) out.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const SweepEntry& a, const SweepEntry& b) { return a.world < b.world; });
  return out;
}

}  // namespace

SweepEntry sweep_entry(const json& run, int world, const std::string& interconnect) {
  SweepEntry e;
  e.label = run.value("label", std::string());
  e.interconnect = interconnect;
  e.world = world;
  e.step_ms = run.at("step_ms").get<double>();
  e.exposed_comm_ms = run.at("exposed_comm_ms").get<double>();
  e.exposed_fraction = e.step_ms > 0 ? e.exposed_comm_ms / e.step_ms : 0.0;
  e.tokens_per_s_per_rank = run.value("tokens_per_s_per_rank", json(nullptr));
  e.peak_bytes = json(nullptr);
  if (run.contains("scale_effects")) {
    e.tokens_simulated = run["scale_effects"].value("tokens_per_s_per_rank_simulated", json(nullptr));
  }
  if (run.contains("memory") && run["memory"].contains("projected_peak")) {
    e.peak_bytes = run["memory"]["projected_peak"].value("max_allocated_bytes", json(nullptr));
    e.fits = run["memory"]["projected_peak"].value("fits", json(nullptr));
  }
  return e;
}

std::vector<int> parse_sweep_worlds(const std::string& list, int gpus_per_node) {
  const std::string accepted =
      "; accepted: a comma-separated list of world sizes >= 1, each once" +
      std::string(gpus_per_node > 0 ? " and a multiple of -gn " + std::to_string(gpus_per_node)
                                    : std::string()) +
      " (e.g. --sweep 8,16,32,64)";
  if (list.find_first_not_of(" ,") == std::string::npos) {
    throw std::invalid_argument("--sweep '" + list + "': the list is empty" + accepted);
  }
  std::vector<int> worlds;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t b = item.find_first_not_of(' ');
    const size_t e = item.find_last_not_of(' ');
    const std::string v = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
    const std::optional<long> world = parse_whole_number(v);
    if (!world || *world < 1 || *world > (1L << 30)) {
      throw std::invalid_argument("--sweep '" + list + "': '" + v + "' is not a world size" +
                                  accepted);
    }
    const long n = *world;
    if (gpus_per_node > 0 && n % gpus_per_node != 0) {
      throw std::invalid_argument("--sweep '" + list + "': " + v + " is not a multiple of -gn " +
                                  std::to_string(gpus_per_node) + accepted);
    }
    if (std::find(worlds.begin(), worlds.end(), static_cast<int>(n)) != worlds.end()) {
      throw std::invalid_argument("--sweep '" + list + "': " + v + " repeats" + accepted);
    }
    worlds.push_back(static_cast<int>(n));
  }
  if (!list.empty() && list.back() == ',') {
    throw std::invalid_argument("--sweep '" + list + "': '' is not a world size" + accepted);
  }
  std::sort(worlds.begin(), worlds.end());
  return worlds;
}

std::vector<std::string> split_interconnect_specs(const std::vector<std::string>& options) {
  std::vector<std::string> specs;
  for (const std::string& o : options) {
    std::stringstream in(o);
    std::string item;
    bool any = false;
    while (std::getline(in, item, ';')) {
      if (item.empty()) {
        throw std::invalid_argument("--interconnect '" + o +
                                    "': an empty spec; accepted: INTRA[,INTER] specs separated "
                                    "by ';' (nvlink3, nvlink4, nvlink5, ib_hdr, ib_ndr, ib_xdr)");
      }
      specs.push_back(item);
      any = true;
    }
    if (!any || o.back() == ';') {
      throw std::invalid_argument("--interconnect '" + o +
                                  "': an empty spec; accepted: INTRA[,INTER] specs separated by "
                                  "';' (nvlink3, nvlink4, nvlink5, ib_hdr, ib_ndr, ib_xdr)");
    }
  }
  return specs;
}

std::optional<int> crossover_world(const std::vector<SweepEntry>& entries, double threshold) {
  std::optional<int> first;
  for (const SweepEntry& e : entries) {
    if (e.exposed_fraction > threshold && (!first || e.world < *first)) first = e.world;
  }
  return first;
}

json sweep_json(const std::vector<SweepEntry>& entries, double threshold) {
  json rows = json::array();
  for (const SweepEntry& e : entries) {
    rows.push_back({{"label", e.label},
                    {"interconnect", e.interconnect},
                    {"world_size", e.world},
                    {"step_ms", e.step_ms},
                    {"exposed_comm_ms", e.exposed_comm_ms},
                    {"exposed_fraction", e.exposed_fraction},
                    {"tokens_per_s_per_rank", e.tokens_per_s_per_rank},
                    {"peak_max_allocated_bytes", e.peak_bytes},
                    {"fits", e.fits}});
    if (!e.tokens_simulated.is_null()) {
      rows.back()["tokens_per_s_per_rank_simulated"] = e.tokens_simulated;
    }
  }
  json crossings = json::array();
  for (const auto& key : series_keys(entries)) {
    const std::optional<int> c = crossover_world(series_of(entries, key), threshold);
    crossings.push_back({{"label", key.first},
                         {"interconnect", key.second},
                         {"world_size", c ? json(*c) : json(nullptr)}});
  }
  return {{"exposed_threshold", threshold}, {"sweep", rows}, {"crossover", crossings}};
}

std::string sweep_text_table(const std::vector<SweepEntry>& entries, double threshold) {
  size_t wl = 3, wi = 12;
  for (const SweepEntry& e : entries) {
    wl = std::max(wl, e.label.size());
    wi = std::max(wi, e.interconnect.size());
  }
  auto pad = [](std::string s, size_t w) {
    return s + std::string(w > s.size() ? w - s.size() : 0, ' ');
  };
  auto rpad = [](std::string s, size_t w) {
    return std::string(w > s.size() ? w - s.size() : 0, ' ') + s;
  };
  bool band = false;
  for (const SweepEntry& e : entries) {
    band = band || (e.tokens_simulated.is_number() && e.tokens_per_s_per_rank.is_number() &&
                    e.tokens_simulated.get<double>() != e.tokens_per_s_per_rank.get<double>());
  }
  std::ostringstream out;
  out << pad("run", wl) << "  " << pad("interconnect", wi) << "  " << rpad("N", 6) << "  "
      << rpad("step_ms", 10) << "  " << rpad("exposed_ms", 10) << "  " << rpad("exposed", 7) << "  "
      << rpad("tok/s/rank", 11) << "  " << rpad("peak_GiB", 9)
      << (band ? "  " + rpad("tok/s_sim", 11) : std::string()) << "\n";
  for (const SweepEntry& e : entries) {
    out << pad(e.label, wl) << "  " << pad(e.interconnect, wi) << "  "
        << rpad(std::to_string(e.world), 6) << "  " << rpad(fmt("%.3f", e.step_ms), 10) << "  "
        << rpad(fmt("%.3f", e.exposed_comm_ms), 10) << "  "
        << rpad(fmt("%.1f%%", 100 * e.exposed_fraction), 7) << "  "
        << rpad(e.tokens_per_s_per_rank.is_number()
                    ? fmt("%.1f", e.tokens_per_s_per_rank.get<double>())
                    : std::string("-"),
                11)
        << "  "
        << rpad(e.peak_bytes.is_number() ? fmt("%.2f", e.peak_bytes.get<double>() / (1 << 30))
                                         : std::string("-"),
                9)
        << (e.fits == false ? " over" : "")
        << (band ? "  " + rpad(e.tokens_simulated.is_number()
                                   ? fmt("%.1f", e.tokens_simulated.get<double>())
                                   : std::string("-"),
                               11)
                 : std::string())
        << "\n";
  }
  for (const auto& key : series_keys(entries)) {
    const std::optional<int> c = crossover_world(series_of(entries, key), threshold);
    out << "crossover (exposed > " << fmt("%g", 100 * threshold) << "% of the step): " << key.first
        << " on " << key.second << ": "
        << (c ? "N = " + std::to_string(*c) : std::string("none in the sweep")) << "\n";
  }
  return out.str();
}

std::string sweep_html(const std::vector<SweepEntry>& entries, double threshold,
                       const std::string& title) {
  const auto keys = series_keys(entries);
  int min_n = 1 << 30, max_n = 1;
  double max_f = threshold;
  std::set<int> worlds;
  size_t longest = 0;
  for (const SweepEntry& e : entries) {
    min_n = std::min(min_n, e.world);
    max_n = std::max(max_n, e.world);
    max_f = std::max(max_f, e.exposed_fraction);
    worlds.insert(e.world);
  }
  for (const auto& k : keys) longest = std::max(longest, k.first.size() + 3 + k.second.size());
  if (entries.empty()) min_n = max_n = 1;
  double x0 = std::log2(static_cast<double>(min_n));
  double x1 = std::log2(static_cast<double>(max_n));
  if (x1 - x0 < 1e-9) {
    x0 -= 0.5;
    x1 += 0.5;
  }
  // y from 0 to a round value above the largest fraction and the threshold.
  double y_max = 1.0;
  for (double c : {0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0}) {
    if (c >= std::min(max_f * 1.05, 1.0)) {
      y_max = c;
      break;
    }
  }
  if (max_f > 1.0) y_max = std::ceil(max_f * 1.05);  // not a fraction of the step: still shown

  const double left = 80, top = 50, plot_w = 560, plot_h = 340, bottom = 60;
  const double legend_x = left + plot_w + 30;
  const double legend_w = 40 + 7.5 * static_cast<double>(longest) + 20;
  const double width = legend_x + legend_w;
  const double height =
      std::max(top + plot_h + bottom, top + 20.0 * static_cast<double>(keys.size() + 1) + 20);
  auto px = [&](double n) { return left + (std::log2(n) - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double f) { return top + plot_h - f / y_max * plot_h; };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
    << html_escape(title) << "</title>\n<style>body{font-family:sans-serif;margin:16px}"
    << "svg text{font-family:sans-serif;font-size:12px}</style>\n</head>\n<body>\n<h1 "
       "style=\"font-size:16px\">"
    << html_escape(title) << "</h1>\n";
  h << "<svg width=\"" << fmt("%.0f", width) << "\" height=\"" << fmt("%.0f", height)
    << "\" viewBox=\"0 0 " << fmt("%.0f", width) << " " << fmt("%.0f", height)
    << "\" role=\"img\" aria-label=\"exposed communication fraction against world size\">\n";
  // Axes.
  h << "<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w
    << "\" y2=\"" << top + plot_h << "\" stroke=\"#000\"/>\n";
  h << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\""
    << top + plot_h << "\" stroke=\"#000\"/>\n";
  for (int n : worlds) {
    const double x = px(n);
    h << "<line x1=\"" << fmt("%.1f", x) << "\" y1=\"" << top + plot_h << "\" x2=\""
      << fmt("%.1f", x) << "\" y2=\"" << top + plot_h + 5 << "\" stroke=\"#000\"/>\n";
    h << "<text x=\"" << fmt("%.1f", x) << "\" y=\"" << top + plot_h + 18
      << "\" text-anchor=\"middle\">" << n << "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const double f = y_max * i / 5;
    const double y = py(f);
    h << "<line x1=\"" << left - 5 << "\" y1=\"" << fmt("%.1f", y) << "\" x2=\"" << left + plot_w
      << "\" y2=\"" << fmt("%.1f", y) << "\" stroke=\"" << (i == 0 ? "#000" : "#e0e0e0")
      << "\"/>\n";
    h << "<text x=\"" << left - 8 << "\" y=\"" << fmt("%.1f", y + 4) << "\" text-anchor=\"end\">"
      << fmt("%g%%", 100 * f) << "</text>\n";
  }
  h << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << top + plot_h + 42
    << "\" text-anchor=\"middle\">world size N (GPUs, log2 scale)</text>\n";
  h << "<text transform=\"translate(18," << top + plot_h / 2
    << ") rotate(-90)\" text-anchor=\"middle\">exposed communication / step</text>\n";
  // Threshold.
  h << "<line class=\"threshold\" x1=\"" << left << "\" y1=\"" << fmt("%.1f", py(threshold))
    << "\" x2=\"" << left + plot_w << "\" y2=\"" << fmt("%.1f", py(threshold))
    << "\" stroke=\"#555\" stroke-dasharray=\"6 4\"/>\n";
  h << "<text x=\"" << left + plot_w - 4 << "\" y=\"" << fmt("%.1f", py(threshold) - 5)
    << "\" text-anchor=\"end\" fill=\"#555\">threshold " << fmt("%g%%", 100 * threshold)
    << "</text>\n";
  // Series and legend.
  for (size_t i = 0; i < keys.size(); ++i) {
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    const std::string name = keys[i].first + " / " + keys[i].second;
    h << "<g class=\"series\" data-run=\"" << html_escape(keys[i].first)
      << "\" data-interconnect=\"" << html_escape(keys[i].second) << "\">\n<polyline fill=\"none\" "
      << "stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    const std::vector<SweepEntry> s = series_of(entries, keys[i]);
    for (size_t j = 0; j < s.size(); ++j) {
      h << (j ? " " : "") << fmt("%.1f", px(s[j].world)) << ","
        << fmt("%.1f", py(s[j].exposed_fraction));
    }
    h << "\"/>\n";
    for (const SweepEntry& e : s) {
      h << "<circle cx=\"" << fmt("%.1f", px(e.world)) << "\" cy=\""
        << fmt("%.1f", py(e.exposed_fraction)) << "\" r=\"3\" fill=\"" << color << "\"><title>"
        << html_escape(name) << ", N = " << e.world << ": "
        << fmt("%.2f%%", 100 * e.exposed_fraction) << "</title></circle>\n";
    }
    h << "</g>\n";
    const double ly = top + 20.0 * static_cast<double>(i);
    h << "<line x1=\"" << legend_x << "\" y1=\"" << ly << "\" x2=\"" << legend_x + 28 << "\" y2=\""
      << ly << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
    h << "<text x=\"" << legend_x + 36 << "\" y=\"" << ly + 4 << "\">" << html_escape(name)
      << "</text>\n";
  }
  h << "</svg>\n</body>\n</html>\n";
  return h.str();
}

}  // namespace shardbench
