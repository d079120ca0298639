// Slurm's compressed host lists ("gpu-[01-03,07],cpu9") and task counts ("4(x2),3"), parsed
// without calling scontrol: srun tasks must find MASTER_ADDR even where scontrol is missing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardbench {

// Expands a Slurm host list in node order: "gpu-[01-03,07],cpu9" gives gpu-01 gpu-02 gpu-03
// gpu-07 cpu9. Ranges keep the zero padding of their start ("[08-10]" gives 08 09 10); several
// bracket groups in one name expand as a product ("r[1-2]n[1-2]" gives r1n1 r1n2 r2n1 r2n2).
// Throws std::invalid_argument naming the list, the offending position and the syntax accepted.
std::vector<std::string> expand_slurm_hostlist(std::string_view hostlist);

// Expands SLURM_TASKS_PER_NODE ("2(x3),1" gives 2 2 2 1), one count per node in node order.
std::vector<int> expand_slurm_tasks_per_node(std::string_view tasks_per_node);

}  // namespace shardbench
