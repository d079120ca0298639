#!/usr/bin/env bash
# Regenerates tables.tgz (the folder tables/, packed so that the repository stays small): each
# measured 2-layer Llama 3 70B run with every layer recomputed (-rl 2 at 2 layers) projected with
# perf-project to the full 80 layers at 8, 64 and 512 GPUs, 8 to a node (NVLink 4 inside, NDR
# InfiniBand between), at the recipe's weak-scaled global batch (4 per GPU), on the H200 it was
# measured on and scaled to the H100 by kernel class (--kernels).
# Run from the repository root after building:
#   results/h200/projection_70b_recompute_2026-12-05/make_tables.sh
set -euo pipefail
D=results/h200/projection_70b_recompute_2026-12-05
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir "$T/tables"
for w in ddp-distopt fsdp-optim_grads_params fsdp2; do
  report=$D/llama3_70b_70b-2l-rl2-${w}_ws1.json
  case $w in
    ddp-distopt) k=ddp-distopt ;;
    fsdp-optim_grads_params) k=megatron_fsdp-optim_grads_params ;;
    fsdp2) k=torch_fsdp2-reshard_after_forward ;;
  esac
  for n in 8 64 512; do
    for g in h200 h100; do
      extra=()
      [ $g = h100 ] && extra=(--kernels $D/llama3_70b_${k}_ws1_rank0.kernels.json)
      build/perf-project "$report" -ng $n -gn 8 -g $g --interconnect nvlink4,ib_ndr \
        -gb $((4 * n)) --num_layers 80 "${extra[@]}" \
        -o $T/tables/70b_rl_${w}_${g}_ng${n}.json > /dev/null
    done
  done
done
tar --sort=name --mtime=2026-12-05 --owner=0 --group=0 --numeric-owner -C "$T" -cf - tables |
  gzip -n > "$D/tables.tgz.tmp"
mv "$D/tables.tgz.tmp" "$D/tables.tgz"
