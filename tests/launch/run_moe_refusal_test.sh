#!/usr/bin/env bash
# A real run of the DeepSeek-V3 recipe, end to end (docs/moe-recipes.md): perf-launch refuses it
# before any worker starts (its row's flex dispatcher is not built), with exit 2, one line on
# stderr naming model.moe_token_dispatcher_type, and nothing written; the same command with --dryrun
# exits 0 and prints the MoE settings and FLOPs.
#   tests/launch/run_moe_refusal_test.sh PATH/TO/perf-launch
set -u
PERF_LAUNCH="$1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cd "$WORK" || exit 1
mkdir reports
"$PERF_LAUNCH" -m deepseek -mr deepseek_v3 -ng 64 -g h100 shardbench.report_dir="$WORK/reports" \
  >"$WORK/out" 2>"$WORK/err"
rc=$?
[ "$rc" -eq 2 ] || fail "exit $rc, expected 2; stderr: $(cat "$WORK/err")"
want="perf-launch: error: model.moe_token_dispatcher_type=flex (from recipe deepseek_v3_pretrain_64gpu_h100_bf16_config): with a mixture of experts (model.num_moe_experts=256): the all-to-all dispatcher is the one implemented (Megatron-Bridge's flex dispatcher runs DeepEP or HybridEP kernels); accepted: alltoall"
[ "$(cat "$WORK/err")" = "$want" ] || fail "stderr was: $(cat "$WORK/err")"
[ ! -s "$WORK/out" ] || fail "stdout was not empty: $(cat "$WORK/out")"
# Nothing written: no report, no results/ folder in the working directory.
[ -z "$(ls -A "$WORK/reports")" ] || fail "reports written: $(ls -A "$WORK/reports")"
[ ! -e "$WORK/results" ] || fail "results/ created"

"$PERF_LAUNCH" -m deepseek -mr deepseek_v3 -ng 64 -g h100 --dryrun >"$WORK/dry" 2>&1 ||
  fail "--dryrun exited $?: $(tail -5 "$WORK/dry")"
grep -q "a real run of this config is refused: model.moe_token_dispatcher_type=flex" "$WORK/dry" ||
  fail "--dryrun does not say the run would be refused"
grep -q "GFLOP per token at seq 4096; .* per step (global batch 256 x seq 4096)" "$WORK/dry" ||
  fail "--dryrun prints no FLOPs per step"
echo "ok"
