#!/usr/bin/env bash
# Regenerates tables.tgz (the folder tables/, packed so that the repository stays small): every
# measured run of this folder projected with perf-project to the full Llama 3 8B (32 layers) and
# 70B (80 layers) at 8, 64 and 512 GPUs, 8 to a node (NVLink 4 inside, NDR InfiniBand between), at
# the recipe's weak-scaled global batch (8B: 16 per GPU, 70B: 4 per GPU), on the H200 it was
# measured on and scaled to the H100 by kernel class (--kernels).
# Run from the repository root after building: results/h200/projection_models_2026-12-05/make_tables.sh
set -euo pipefail
D=results/h200/projection_models_2026-12-05
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir "$T/tables"
for model in 8b 70b; do
  if [ $model = 8b ]; then layers=32; per_gpu=16; cut=4l; else layers=80; per_gpu=4; cut=2l; fi
  for w in ddp-distopt fsdp-optim_grads_params fsdp2; do
    report=$D/llama3_${model}_${model}-${cut}-${w}_ws1.json
    case $w in
      ddp-distopt) k=ddp-distopt ;;
      fsdp-optim_grads_params) k=megatron_fsdp-optim_grads_params ;;
      fsdp2) k=torch_fsdp2-reshard_after_forward ;;
    esac
    for n in 8 64 512; do
      for g in h200 h100; do
        extra=()
        [ $g = h100 ] && extra=(--kernels $D/llama3_${model}_${k}_ws1_rank0.kernels.json)
        build/perf-project "$report" -ng $n -gn 8 -g $g --interconnect nvlink4,ib_ndr \
          -gb $((per_gpu * n)) --num_layers $layers "${extra[@]}" \
          -o $T/tables/${model}_${w}_${g}_ng${n}.json > /dev/null
      done
    done
  done
done
tar --sort=name --mtime=2026-12-05 --owner=0 --group=0 --numeric-owner -C "$T" -cf - tables |
  gzip -n > "$D/tables.tgz.tmp"
mv "$D/tables.tgz.tmp" "$D/tables.tgz"
