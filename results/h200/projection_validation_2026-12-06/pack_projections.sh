# Sourced by make_projections.sh here and in results/h100/projection_validation_2026-12-07.
# effect_flags V sets the array fx to perf-project's scale-effect flags of variant V (base, scale,
# scale_f05; docs/projection.md, "Effects at scale").
effect_flags() {
  case $1 in
    base) fx=() ;;
    scale) fx=(--nccl_algo auto --jitter normal) ;;
    scale_f05) fx=(--nccl_algo auto --jitter normal --inter_node_efficiency 0.5) ;;
  esac
}

# pack_projections DIR OUT MTIME packs DIR/projections into OUT (projections.tgz, reproducible:
# sorted names, one mtime, no owner, gzip without a timestamp) after dropping each run's
# per-collective timeline (`collectives`: launch, start and end of every collective of a step),
# most of a projection's bytes and not read by table.py, for its length (`collectives_dropped`).
# Rerun the projections without this step to see it.
pack_projections() {
  local dir=$1 out=$2 mtime=$3
  python3 - "$dir/projections" <<'PY'
import json, sys
from pathlib import Path
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    doc = json.loads(f.read_text())
    for run in doc["runs"]:
        run["collectives_dropped"] = len(run.pop("collectives", []))
    f.write_text(json.dumps(doc, indent=1) + "\n")
PY
  tar --sort=name --mtime="$mtime" --owner=0 --group=0 --numeric-owner -C "$dir" -cf - projections |
    gzip -n > "$out.tmp"
  mv "$out.tmp" "$out"
}
