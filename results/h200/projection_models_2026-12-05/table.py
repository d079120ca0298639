#!/usr/bin/env python3
"""Prints the markdown tables of tables.tgz's tables/*.json (make_tables.sh's projections), as
README.md has them. Run from the repository root:
python3 results/h200/projection_models_2026-12-05/table.py"""
import json
import tarfile

TABLES = tarfile.open('results/h200/projection_models_2026-12-05/tables.tgz')
NAMES = {'ddp-distopt': 'DDP + dist. optimizer', 'fsdp-optim_grads_params':
         'Megatron FSDP optim_grads_params', 'fsdp2': 'FSDP2'}
for model, title in (('8b', 'Llama 3 8B (32 layers, seq 8192, GBS 16 per GPU)'),
                     ('70b', 'Llama 3 70B (80 layers, seq 8192, GBS 4 per GPU)')):
    for gpu in ('h200', 'h100'):
        print(f'\n{title} on {gpu.upper()}:\n')
        print('| wrapper | GPUs | step s | exposed comm | tokens/s/GPU | TFLOP/s/GPU | peak GiB/GPU |')
        print('|---|---|---|---|---|---|---|')
        for w in ('ddp-distopt', 'fsdp-optim_grads_params', 'fsdp2'):
            for n in (8, 64, 512):
                p = json.load(TABLES.extractfile(f'tables/{model}_{w}_{gpu}_ng{n}.json'))['runs'][0]
                peak = p['memory']['projected_peak']['max_allocated_bytes'] / 2**30
                # perf-project's verdict against one GPU's memory (141 GiB H200, 80 GiB H100).
                over = ' (over)' if p['memory']['projected_peak']['fits'] is False else ''
                print(f"| {NAMES[w]} | {n} | {p['step_ms'] / 1e3:.2f} | "
                      f"{p['exposed_comm_ms']:.0f} ms ({100 * p['exposed_comm_ms'] / p['step_ms']:.1f}%) | "
                      f"{p['tokens_per_s_per_rank']:,.0f} | {p['tflops_per_s_per_rank']:.0f} | "
                      f"{peak:.1f}{over} |")
