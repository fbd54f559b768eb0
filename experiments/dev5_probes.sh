#!/usr/bin/env bash
# The dev-set probes of issue 37 (docs/learning.md, section 5), one label after the other, alone
# on the machine's cores: `make probe` for each label below, in this order. Resumable: run it
# again and each game resumes from its checkpoint; a finished label is only reported. Each
# label's log goes to PROBE_ROOT/<label>.log, its runs to PROBE_ROOT/<label>/<game>, their
# archives to docs/learning/probes/<label>/.
#
#   nohup bash experiments/dev5_probes.sh > /dev/null 2>&1 &        # PROBE_ROOT=~/stampede-runs
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${PROBE_ROOT:-$HOME/stampede-runs}
mkdir -p "$ROOT"
probe() {  # probe <label> [overrides...]
    local label=$1
    shift
    .venv/bin/python benchmarks/probe.py --root "$ROOT" --label "$label" -- "$@" \
        >> "$ROOT/$label.log" 2>&1
}
probe defaults
probe lr2.5e-4 optim.lr=0.00025
probe advbatch vtrace.advantage_stats=batch
probe lr5e-4 optim.lr=0.0005
probe retscale vtrace.advantage_stats=returns vtrace.entropy_cost=0.0003
