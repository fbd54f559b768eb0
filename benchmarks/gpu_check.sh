#!/usr/bin/env bash
# GPU readiness, throughput and a learning check in one command that fits one 10-minute device
# call (docs/architecture.md, "GPU placement"; issue 38):
#   1. the CUDA tests (pytest -m gpu: the learner's update, bf16 and the captured step on CUDA,
#      pinned batch copies, the inference server, device=cuda runs that train and resume);
#   2. `make bench` on Pong with the DQN network: the learner-only ceiling eager, compiled and
#      captured (runtime.cuda_graph), fp32 and bf16, and the full loop (actor placement) eager and
#      captured, with the GPU's utilisation while it ran;
#   3. Pong for LEARN_FRAMES (default 10M) with the captured learner: frames and wall time to 0,
#      +10 and +18 (benchmarks/learning.py);
#   4. the same bench with the ResNet.
# Each step runs under a cap, cut to what is left of TOTAL_S (default 560 s), in that order of
# priority, so the summary is written within one call whatever a step costs; a step cut short
# says so (exit 124). Usage: bash benchmarks/gpu_check.sh [SECONDS] (per measurement, default
# 6). Logs and the summary (gpu_check.md) go to $OUT when set (the device tool's folder), else
# to a temporary folder. Exits 2 without a visible CUDA GPU, 1 if a step failed, 0 if all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}  # PY=python3 on a machine whose python3 has torch and the deps
SECONDS_EACH=${1:-6}
LEARN_FRAMES=${LEARN_FRAMES:-10000000}
TOTAL_S=${TOTAL_S:-560}
DEADLINE=$(( $(date +%s) + TOTAL_S ))
cap() {  # cap <seconds>: that, or what is left before the deadline if less (at least 1)
    local left=$(( DEADLINE - $(date +%s) ))
    (( left < $1 )) && echo $(( left > 1 ? left : 1 )) || echo "$1"
}
DIR=${OUT:-$(mktemp -d -t stampede-gpu-check.XXXXXX)}
mkdir -p "$DIR"
SUMMARY="$DIR/gpu_check.md"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA GPU visible to $PY (torch.cuda.is_available() is False); nothing checked"
    exit 2
fi
gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')
echo "gpu_check: $gpu, torch $("$PY" -c 'import torch; print(torch.__version__)'), $(nproc) CPUs; logs in $DIR"

# The GPU's utilisation every half second, for the whole check: each step's share is averaged.
nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 \
    > "$DIR/utilisation.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
utilisation() {  # mean and max utilisation (%) between two epoch seconds
    "$PY" - "$DIR/utilisation.csv" "$1" "$2" <<'EOF'
import datetime, sys
path, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
values = []
for line in open(path):
    stamp, _, util = line.rpartition(",")
    try:
        t = datetime.datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        if start <= t <= end:
            values.append(float(util))
    except ValueError:
        continue
print(f"GPU utilisation mean {sum(values) / len(values):.0f}%, max {max(values):.0f}%" if values else "GPU utilisation: not sampled")
EOF
}

timeout "$(cap 90)" "$PY" -m pytest -m gpu -p no:cacheprovider -q tests > "$DIR/tests.log" 2>&1
tests_rc=$?
echo "CUDA tests: exit $tests_rc: $(tail -n 1 "$DIR/tests.log")"

bench() {  # bench <model> <cap>: the learner's three modes, two precisions; the actor-placement loop
    local start; start=$(date +%s)
    timeout "$(cap "$2")" "$PY" benchmarks/throughput.py --seconds "$SECONDS_EACH" --placements actor --graph \
        --no-deterministic device=cuda "model=$1" > "$DIR/bench_$1.log" 2>&1
    local rc=$?
    utilisation "$start" "$(date +%s)" >> "$DIR/bench_$1.log"
    echo "make bench model=$1: exit $rc"
    return $rc
}

bench_rc=0
bench nature 150 || bench_rc=1

learn_start=$(date +%s)
learn_cap=$(cap 270)
timeout "$learn_cap" "$PY" run.py env=atari env.game=pong device=cuda runtime.cuda_graph=true \
    total_frames="$LEARN_FRAMES" hydra.run.dir="$DIR/pong" logger.progress=false \
    logger.wandb.mode=disabled > "$DIR/learn.log" 2>&1
learn_rc=$?
"$PY" benchmarks/learning.py --report-only --game pong --run-dir "$DIR/pong" --label gpu_graph \
    --out "$DIR/learning" > "$DIR/learn_report.log" 2>&1 || learn_rc=1
utilisation "$learn_start" "$(date +%s)" >> "$DIR/learn_report.log"
rm -rf "$DIR/pong/checkpoints" "$DIR/pong/wandb"  # its games and metrics come back, not its weights
echo "Pong ($LEARN_FRAMES frames, captured learner): exit $learn_rc"

bench resnet 170 || bench_rc=1

status() { [ "$1" -eq 0 ] && echo passed || echo "FAILED (exit $1)"; }
{
    echo "== gpu_check summary ($gpu, $(nproc) CPUs) =="
    echo "CUDA tests: $(status $tests_rc): $(tail -n 1 "$DIR/tests.log")"
    for model in nature resnet; do
        echo "make bench device=cuda model=$model ($SECONDS_EACH s each):"
        grep -E "^machine|ceiling|^full loop \(|utilisation" "$DIR/bench_$model.log" | sed 's/^/  /'
    done
    echo "Pong with the captured learner ($(status $learn_rc), $LEARN_FRAMES frames at most, ${learn_cap} s limit):"
    grep -E "frames of pong|mean of last|utilisation" "$DIR/learn_report.log" | sed 's/^/  /'
    grep -E "perf/fps" "$DIR/learn.log" | tail -n 1 | grep -oE "env/frames=[0-9]+ perf/fps=[0-9]+" | sed 's/^/  last: /'
} | tee "$SUMMARY"
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $learn_rc -eq 0 ]
