#!/usr/bin/env bash
# GPU readiness in one command, for a CUDA machine (docs/architecture.md, "GPU placement"):
#   1. the CUDA tests (pytest -m gpu: learner update on CUDA vs CPU, a device=cuda run that
#      trains, checkpoints and resumes, V-trace on CUDA);
#   2. a 2-minute `device=cuda` Pong run with the defaults, stopped by SIGTERM (a clean stop);
#   3. `make bench ARGS="device=cuda"` (env-only and learner-only ceilings and the full loop);
# then one summary. Usage: bash benchmarks/gpu_check.sh [PONG_SECONDS] (default 120).
# Exits 2 without a visible CUDA GPU, 1 if a step failed, 0 if all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SECONDS_PONG=${1:-120}
OUT=$(mktemp -d -t stampede-gpu-check.XXXXXX)

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA GPU visible to $PY (torch.cuda.is_available() is False); nothing checked"
    exit 2
fi
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')
echo "gpu_check: $gpu, torch $("$PY" -c 'import torch; print(torch.__version__)'), $(nproc) CPUs; logs in $OUT"

"$PY" -m pytest -m gpu -p no:cacheprovider -q tests > "$OUT/tests.log" 2>&1
tests_rc=$?

timeout --signal=TERM --kill-after=60 "$SECONDS_PONG" "$PY" run.py device=cuda env=pong \
    total_frames=1000000000 "hydra.run.dir=$OUT/pong" logger.progress=false \
    logger.wandb.mode=disabled > "$OUT/pong.log" 2>&1
pong_rc=$?  # 124: stopped by the timeout's SIGTERM, as intended
pong_fps=$("$PY" - "$OUT/pong/metrics.jsonl" <<'PYEOF'
import json, pathlib, sys
path = pathlib.Path(sys.argv[1])
rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
fps = [r["perf/fps"] for r in rows[len(rows) // 2 :] if "perf/fps" in r]  # after warm-up
print(f"{sum(fps) / len(fps):.0f} frames/s over its last {len(fps)} log lines, "
      f"{rows[-1]['env/frames']} frames" if fps else "no metrics")
PYEOF
)

make bench ARGS="device=cuda" > "$OUT/bench.log" 2>&1
bench_rc=$?

status() { [ "$1" -eq 0 ] && echo passed || echo "FAILED (exit $1)"; }
echo
echo "== gpu_check summary ($gpu) =="
echo "CUDA tests: $(status $tests_rc): $(tail -n 1 "$OUT/tests.log")"
[ $pong_rc -eq 124 ] && pong_rc=0
echo "Pong, device=cuda, ${SECONDS_PONG}s: $(status $pong_rc): $pong_fps"
echo "make bench device=cuda: $(status $bench_rc)"
grep -E "ceiling|loop|ideal" "$OUT/bench.log" | sed 's/^/  /'
[ $tests_rc -eq 0 ] && [ $pong_rc -eq 0 ] && [ $bench_rc -eq 0 ]
