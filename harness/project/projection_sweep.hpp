// perf-project --sweep (issue 19, docs/projection.md "Sweep"): the single-target projections of
// a report at several world sizes and interconnects gathered into one table, the crossover (the
// smallest world size at which exposed communication exceeds a fraction of the step) per run and
// interconnect, a text table and a self-contained HTML chart. The projections themselves come
// from perf-project's single-target path (harness/project/project_cli.cpp); this file only reads
// their runs. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

// One cell of the sweep: one run of the report at one world size on one interconnect.
struct SweepEntry {
  std::string label;         // the run's label
  std::string interconnect;  // as given ("nvlink4,ib_ndr"), or the collectives_bench file
  int world = 0;
  double step_ms = 0;
  double exposed_comm_ms = 0;
  double exposed_fraction = 0;           // exposed_comm_ms / step_ms
  nlohmann::json tokens_per_s_per_rank;  // number or null, as in the projected run
  nlohmann::json peak_bytes;             // memory.projected_peak.max_allocated_bytes, or null
  nlohmann::json fits;                   // memory.projected_peak.fits (true/false), or null
  // The simulator's tokens/s before the straggler and host terms (scale_effects.
  // tokens_per_s_per_rank_simulated), or null: with --jitter or --host_ms the sweep shows the
  // band between the two.
  nlohmann::json tokens_simulated;
};

// The entry of one projected run (an element of perf-project's "runs", projected at `world` on
// `interconnect`): its numbers copied as they are, the fraction derived from them.
SweepEntry sweep_entry(const nlohmann::json& projected_run, int world,
                       const std::string& interconnect);

// The world sizes of --sweep ("8,16,32"): ascending. Throws std::invalid_argument naming --sweep,
// the value and what is accepted when the list is empty, an element is not an integer >= 1, a
// size repeats, or (gpus_per_node > 0) a size is not a multiple of -gn.
std::vector<int> parse_sweep_worlds(const std::string& list, int gpus_per_node);

// The interconnect specs of one or more --interconnect options, each possibly a ';'-separated
// list ("nvlink4,ib_ndr;nvlink5,ib_xdr"). Empty elements are refused (std::invalid_argument).
std::vector<std::string> split_interconnect_specs(const std::vector<std::string>& options);

// The smallest world size whose exposed fraction exceeds `threshold` (strictly), among `entries`
// of one run and interconnect; nullopt when none does.
std::optional<int> crossover_world(const std::vector<SweepEntry>& entries, double threshold);

// The document's "sweep" (one row per entry) and "crossover" (one row per run and interconnect,
// "world_size" null when none crosses) in the order the entries came.
nlohmann::json sweep_json(const std::vector<SweepEntry>& entries, double threshold);

// The compact table perf-project prints: one line per entry, then the crossovers. When a
// straggler or host term moved some entry's tokens/s, a last column gives the simulator's
// tokens/s without them (the upper end of the band).
std::string sweep_text_table(const std::vector<SweepEntry>& entries, double threshold);

// One self-contained HTML page (no scripts, fonts or links; inline SVG): exposed-communication
// fraction against world size on a log2 axis, one polyline (class "series") per run and
// interconnect, the threshold as a dashed line, labelled axes and a legend sized to its labels.
std::string sweep_html(const std::vector<SweepEntry>& entries, double threshold,
                       const std::string& title);

}  // namespace shardbench
