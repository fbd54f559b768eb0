#!/usr/bin/env bash
# The dev-set probes of issue 37 (docs/learning.md, section 5), one label after the other, alone
# on the machine's cores. First a screen: each screened label trains BeamRider, the dev game the
# defaults leave at random play, so each hypothesis shows early whether it moves the game that
# needs it. Then each label that passed the screen has its full probe (`make probe`): the other
# four games; BeamRider's run is the screen's, only reported again. The leading label's gate, Pong
# at 10M frames on 3 seeds, runs after its full probe. Resumable: run it again and
# each game resumes from its checkpoint; a finished game is only reported. Each label's log goes to
# PROBE_ROOT/<label>.log, its runs to PROBE_ROOT/<label>/<game>, their archives to
# docs/learning/probes/<label>/.
#
#   nohup bash experiments/dev5_probes.sh > /dev/null 2>&1 &        # PROBE_ROOT=~/stampede-runs
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${PROBE_ROOT:-$HOME/stampede-runs}
mkdir -p "$ROOT"
# Each label's recipe, written once: a label names one recipe (probe.py refuses a changed one).
declare -A RECIPES=(
    [defaults]=""
    [lr2.5e-4]="optim.lr=0.00025"
    [advbatch]="vtrace.advantage_stats=batch"
    [retscale]="vtrace.advantage_stats=returns vtrace.entropy_cost=0.0003"
    [lr5e-4]="optim.lr=0.0005"
    [retscale-lr2.5e-4]="vtrace.advantage_stats=returns vtrace.entropy_cost=0.0003 optim.lr=0.00025"
)
# The screen's labels, in order (docs/learning.md, section 5, has their results).
SCREENS=(lr2.5e-4 advbatch retscale lr5e-4 retscale-lr2.5e-4)
# The full probes: the labels that moved BeamRider, best first (advbatch left it at random play).
PROBES=(retscale lr2.5e-4)
probe() {  # probe <games> <label>: the label's recipe from RECIPES
    local games=$1 label=$2
    # shellcheck disable=SC2086  # <games> and the recipe are lists of words
    .venv/bin/python benchmarks/probe.py --root "$ROOT" --games $games --label "$label" \
        -- ${RECIPES[$label]} >> "$ROOT/$label.log" 2>&1
}
probe dev5 defaults
# The candidate first (the first of PROBES): its full probe, then its gate (docs/learning.md,
# section 5): Pong at 10M frames on seeds 1, 2 and 3, each at least +17; the curves go to
# docs/learning/pong_<label>_seed<k>.csv beside the defaults'.
GATE=${PROBES[0]}
probe dev5 "$GATE"
# shellcheck disable=SC2086  # the recipe is a list of words
.venv/bin/python benchmarks/learning.py --game pong --frames 10000000 --seeds 3 --label "$GATE" \
    --run-dir "$ROOT/gate/$GATE/pong" -- ${RECIPES[$GATE]} >> "$ROOT/gate-$GATE.log" 2>&1
for label in "${SCREENS[@]}"; do
    probe beam_rider "$label"
done
for label in "${PROBES[@]:1}"; do
    probe dev5 "$label"
done
