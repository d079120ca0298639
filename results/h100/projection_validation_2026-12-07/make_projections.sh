#!/usr/bin/env bash
# Regenerates projections.tgz (the folder projections/, packed): the one-GPU H100 runs of the
# published shapes (results/h100/projection_validation_runs_2026-12-07/reports.tgz, made by
# scripts/gpu_runs/projection_validation.runs) projected with perf-project to every GPU count of
# the published points in results/h200/projection_validation_2026-12-06/published.json, each under
# three sets of scale-effect flags (docs/projection.md, "Effects at scale"):
#   base      none (the simulator alone, the table's interconnect at full bandwidth)
#   scale     --nccl_algo auto --jitter normal
#   scale_f05 --nccl_algo auto --jitter normal --inter_node_efficiency 0.5
# Point -> report: each published point takes the run of its own shape (the runs file's comments),
# measured with 4 layers (GPT-175B: 2) and projected to the published model's layer count
# (--num_layers). Every run is FSDP2 except Megatron-Bridge's (Megatron FSDP optim_grads_params,
# FP8 current scaling). The reports are H100 runs: H100 targets use them as measured; the H200
# (KempnerForge) and A100 targets scale the H100 compute by kernel class (--kernels, the datasheets'
# ratios). The global batch keeps the published number of micro-batches per GPU (-gb = the
# published micro-batch x GPUs x accumulation steps; each report's micro-batch is the published one).
# perf-project runs inside the folder the reports are extracted to, so each projection's
# from_report and command name the report by its path inside reports.tgz (validation/...).
# Run from the repository root after building: results/h100/projection_validation_2026-12-07/make_projections.sh
set -euo pipefail
. results/h200/projection_validation_2026-12-06/pack_projections.sh  # effect_flags, pack_projections
D=results/h100/projection_validation_2026-12-07
REPORTS=results/h100/projection_validation_runs_2026-12-07/reports.tgz
PP=$(realpath "${PERF_PROJECT:-build/perf-project}")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir "$T/projections"
tar -xzf "$REPORTS" -C "$T"
V=validation  # relative to $T, where perf-project runs
pp() { (cd "$T" && "$PP" "$@") > /dev/null; }

# report and kernel summary of the run named $1 (the runs file's first column)
report() {
  local stem=torch_fsdp2-reshard_after_forward
  case $1 in *-fsdp-optim_grads_params*) stem=megatron_fsdp-optim_grads_params ;; esac
  echo "$V/llama3_8b_$1_ws1.json $V/profile_$1/llama3_8b_${stem}_ws1_rank0.kernels.json"
}

# point run wrapper gpu gpus_per_node interconnect microbatch accum layers "N..."
# (wrapper: the label in the output names, fsdp2 or mfsdp)
project() {
  local point=$1 run=$2 w=$3 gpu=$4 gn=$5 ic=$6 mb=$7 ga=$8 nl=$9 ns=${10}
  local rep kern kernels=()
  read -r rep kern <<< "$(report "$run")"
  [ "$gpu" != h100 ] && kernels=(--kernels "$kern")
  for n in $ns; do
    for v in base scale scale_f05; do
      effect_flags "$v"
      pp "$rep" -ng "$n" -gn "$gn" -g "$gpu" --interconnect "$ic" -gb $((mb * n * ga)) \
        --num_layers "$nl" ${kernels[@]+"${kernels[@]}"} ${fx[@]+"${fx[@]}"} \
        -o "projections/${point}_${w}_${v}_ng${n}.json"
    done
  done
}

# Up to 64 GPUs: llm-foundry's H100 table, KempnerForge (H200), Megatron-Bridge (H100, FP8).
project mpt13b_h100            mpt13b-4l-fsdp2                     fsdp2 h100 8 nvlink4,ib_ndr 2  1  40 "8 16 32 64"
project mpt3b_h100             mpt3b-4l-fsdp2                      fsdp2 h100 8 nvlink4,ib_ndr 6  3  32 "32 64"
project mpt1b_h100             mpt1b-4l-fsdp2                      fsdp2 h100 8 nvlink4,ib_ndr 20 1  24 "16 32 64"
project mpt760m_h100           mpt760m-4l-fsdp2                    fsdp2 h100 8 nvlink4,ib_ndr 24 1  24 "16 32"
project kempner_llama3_8b_h200 8b-4l-s4096-mb4-rl4-fsdp2           fsdp2 h200 4 nvlink4,ib_ndr 4  2  32 "1 2 4"
project bridge_llama3_8b_h100  8b-4l-fsdp-optim_grads_params-fp8cs mfsdp h100 8 nvlink4,ib_ndr 1  16 32 "8"
# Past 64 GPUs: the FSDP paper (A100 80GB) and llm-foundry's A100 40GB table.
project fsdp_paper_gpt175b_b1_a100 gpt175b-2l-rl2-mb1-fsdp2         fsdp2 a100      8 nvlink3,ib_hdr 1  1 96 "128 192 256 384 512"
project fsdp_paper_gpt175b_b2_a100 gpt175b-2l-rl2-mb2-fsdp2         fsdp2 a100      8 nvlink3,ib_hdr 2  1 96 "192 256 384 512"
project fsdp_paper_t5_11b_b8_a100  t5-11b-standin-4l-rl4-mb8-fsdp2  fsdp2 a100      8 nvlink3,ib_hdr 8  1 48 "8 16 32 64 128 256 512"
project fsdp_paper_t5_11b_b16_a100 t5-11b-standin-4l-rl4-mb16-fsdp2 fsdp2 a100      8 nvlink3,ib_hdr 16 1 48 "8 16 32 64 128 256 512"
project mpt7b_a100_40gb            mpt7b-4l-rl4-mb18-fsdp2          fsdp2 a100_40gb 8 nvlink3,ib_hdr 18 1 32 "32 64 128"
project mpt13b_a100_40gb           mpt13b-4l-rl4-mb16-fsdp2         fsdp2 a100_40gb 8 nvlink3,ib_hdr 16 1 40 "64 128"
project mpt3b_a100_40gb            mpt3b-4l-fsdp2                   fsdp2 a100_40gb 8 nvlink3,ib_hdr 6  1 32 "32 64 128"
project mpt1b_a100_40gb            mpt1b-4l-mb10-fsdp2              fsdp2 a100_40gb 8 nvlink3,ib_hdr 10 1 24 "64 128"
project mpt760m_a100_40gb          mpt760m-4l-mb12-fsdp2            fsdp2 a100_40gb 8 nvlink3,ib_hdr 12 1 24 "16 32 64 128"
project mpt350m_a100_40gb          mpt350m-4l-mb18-fsdp2            fsdp2 a100_40gb 8 nvlink3,ib_hdr 18 1 24 "16 32 64 128"
project mpt125m_a100_40gb          mpt125m-4l-mb26-fsdp2            fsdp2 a100_40gb 8 nvlink3,ib_hdr 26 1 12 "16 32 64 128"

# Diagnostic (not a published point): the T5-11B shape at batch 8 (FSDP2, 48 layers, A100) with the
# network at a fraction F of its bandwidth, to show where a bandwidth shortfall would put the loss
# (table.py's last table). diag_t5_fsdp2_f<F>_ng<N>.json.
read -r rep kern <<< "$(report t5-11b-standin-4l-rl4-mb8-fsdp2)"
for f in 1 0.25 0.15 0.1; do
  for n in 8 16 128 256 512; do
    pp "$rep" -ng "$n" -gn 8 -g a100 --interconnect nvlink3,ib_hdr -gb $((8 * n)) --num_layers 48 \
      --kernels "$kern" --inter_node_efficiency "$f" -o "projections/diag_t5_fsdp2_f${f}_ng${n}.json"
  done
done

# Drop each run's per-collective timeline and pack (pack_projections.sh).
pack_projections "$T" "$D/projections.tgz" 2026-12-07
