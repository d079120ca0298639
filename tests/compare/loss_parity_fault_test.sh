#!/usr/bin/env bash
# ctest driver: the loss-parity check catches a wrongly scaled gradient end to end. Two tiny CPU
# runs of Megatron FSDP with its DDP baseline in the same report (10 steps each): a clean one must
# pass parity and exit 0; one with the test-only fault shardbench.test_fault_grad_scale
# (megatron_fsdp's rank 0 halves its gradient contribution) must exit 1 with a "fail" loss parity
# in its report, and perf-compare must fail the FSDP pair with "loss_mismatch".
#   loss_parity_fault_test.sh PERF_LAUNCH PERF_COMPARE WORK_DIR
set -euo pipefail
perf_launch="$1" perf_compare="$2" work="$3"
[ -x "$perf_launch" ] || { echo "perf-launch is not built ($perf_launch): skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
common=(-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true -ms 10)

rc=0
"$perf_launch" "${common[@]}" --report "$work/clean.json" > "$work/clean.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { echo "clean run exited $rc"; tail -20 "$work/clean.log"; exit 1; }
rc=0
"$perf_launch" "${common[@]}" shardbench.test_fault_grad_scale=megatron_fsdp:0.5 \
  --report "$work/fault.json" > "$work/fault.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || { echo "faulty run exited $rc, expected 1"; tail -20 "$work/fault.log"; exit 1; }
grep -q "loss parity failed" "$work/fault.log" || { echo "no loss parity message"; tail -20 "$work/fault.log"; exit 1; }

python3 - "$work/clean.json" "$work/fault.json" <<'PY'
import json, sys
clean, fault = (json.load(open(p)) for p in sys.argv[1:3])
c, f = clean["comparisons"][0]["loss_parity"], fault["comparisons"][0]["loss_parity"]
assert c["verdict"] == "ok", c["summary"]
assert f["verdict"] == "fail", f["summary"]
assert len(f["loss_diff"]) == 10, f["loss_diff"]
# The fault is part of the run's identity: it never passes for a real run.
assert fault["runs"][0]["identity"]["test_fault"] == "grad_scale:megatron_fsdp:0.5"
assert clean["runs"][0]["identity"]["test_fault"] is None
print("clean:", c["summary"])
print("fault:", f["summary"])
PY

# perf-compare: the faulty report never matches the clean one by identity ..
rc=0
"$perf_compare" "$work/clean.json" "$work/fault.json" > "$work/compare_strict.txt" 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "perf-compare matched a faulty run with a real one (exit $rc)"; exit 1; }
# .. and when told to ignore that, it fails the FSDP pair on loss parity.
rc=0
"$perf_compare" "$work/clean.json" "$work/fault.json" --ignore_identity test_fault \
  --format json > "$work/compare.json" 2> "$work/compare.err" || rc=$?
[ "$rc" = 1 ] || { echo "perf-compare exited $rc, expected 1"; cat "$work/compare.err"; exit 1; }
grep -q '"loss_mismatch"' "$work/compare.json" || { echo "no loss_mismatch verdict"; exit 1; }
echo "loss parity fault: caught"
