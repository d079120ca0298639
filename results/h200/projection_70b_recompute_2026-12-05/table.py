#!/usr/bin/env python3
"""Prints the markdown table of tables.tgz's tables/*.json (make_tables.sh's projections) as
README.md's "Projecting to more GPUs" has it. Run from the repository root:
python3 results/h200/projection_70b_recompute_2026-12-05/table.py"""
import json
import tarfile

TABLES = tarfile.open('results/h200/projection_70b_recompute_2026-12-05/tables.tgz')
NAMES = {'ddp-distopt': 'DDP + dist. optimizer', 'fsdp-optim_grads_params':
         'Megatron FSDP optim_grads_params', 'fsdp2': 'FSDP2'}
print('| wrapper | GPUs | H200 step s | H200 tokens/s/GPU | H200 exposed comm | H100 step s | '
      'H100 tokens/s/GPU | peak GiB/GPU | fits H200 / H100 |')
print('|---|---|---|---|---|---|---|---|---|')
for w in ('ddp-distopt', 'fsdp-optim_grads_params', 'fsdp2'):
    for n in (8, 64, 512):
        a, b = (json.load(TABLES.extractfile(f'tables/70b_rl_{w}_{g}_ng{n}.json'))['runs'][0]
                for g in ('h200', 'h100'))
        peak = a['memory']['projected_peak']
        # perf-project's verdict against one GPU's memory (141 GiB H200, 80 GiB H100).
        fits = ' / '.join('yes' if p['memory']['projected_peak']['fits'] else 'no' for p in (a, b))
        print(f"| {NAMES[w]} | {n} | {a['step_ms'] / 1e3:.2f} | {a['tokens_per_s_per_rank']:,.0f} | "
              f"{100 * a['exposed_comm_ms'] / a['step_ms']:.1f}% | {b['step_ms'] / 1e3:.2f} | "
              f"{b['tokens_per_s_per_rank']:,.0f} | {peak['max_allocated_bytes'] / 2**30:.1f} | {fits} |")
