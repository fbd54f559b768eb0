#!/usr/bin/env bash
# GPU readiness and throughput in one command, for a CUDA machine (docs/architecture.md,
# "GPU placement"):
#   1. the CUDA tests (pytest -m gpu: the learner's update and bf16 on CUDA, pinned batch copies,
#      the inference server on CUDA, a central-inference run where only the learner and the
#      server hold the GPU, a device=cuda run that trains, checkpoints and resumes);
#   2. `make bench` on Pong with the default DQN network and with the ResNet (MODELS), each for both
#      inference placements (actor, central) and both precisions (fp32, bf16): frames/s, the
#      learner's, actors' and server's time budgets, GPU memory;
# then one summary table. Usage: bash benchmarks/gpu_check.sh [SECONDS] (per measurement,
# default 20). Exits 2 without a visible CUDA GPU, 1 if a step failed, 0 if all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}  # PY=python3 on a machine whose python3 has torch and the deps
MODELS=${MODELS:-nature resnet}
SECONDS_EACH=${1:-20}
OUT=$(mktemp -d -t stampede-gpu-check.XXXXXX)

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA GPU visible to $PY (torch.cuda.is_available() is False); nothing checked"
    exit 2
fi
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')
echo "gpu_check: $gpu, torch $("$PY" -c 'import torch; print(torch.__version__)'), $(nproc) CPUs; logs in $OUT"

"$PY" -m pytest -m gpu -p no:cacheprovider -q tests > "$OUT/tests.log" 2>&1
tests_rc=$?
echo "CUDA tests: exit $tests_rc: $(tail -n 1 "$OUT/tests.log")"

bench_rc=0
for model in $MODELS; do
    "$PY" benchmarks/throughput.py --seconds "$SECONDS_EACH" --no-compile device=cuda "model=$model" \
        > "$OUT/bench_$model.log" 2>&1 || bench_rc=1
    echo "make bench model=$model: done ($(tail -n 1 "$OUT/bench_$model.log" | cut -c1-60)...)"
done

status() { [ "$1" -eq 0 ] && echo passed || echo "FAILED (exit $1)"; }
echo
echo "== gpu_check summary ($gpu, $(nproc) CPUs) =="
echo "CUDA tests: $(status $tests_rc): $(tail -n 1 "$OUT/tests.log")"
for model in $MODELS; do
    echo "make bench device=cuda model=$model ($SECONDS_EACH s each):"
    grep -E "^machine|ceiling|learner-only" "$OUT/bench_$model.log" | sed 's/^/  /'
    sed -n '/^full loop, frames/,$p' "$OUT/bench_$model.log" | sed 's/^/  /'
done
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ]
