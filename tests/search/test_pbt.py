"""Population-based training: the controller's decisions (``stampede.search.pbt``) and a whole
population on CartPole through ``python run.py +experiment=pbt_pong`` (the sweeper
``hydra/sweeper=pbt``)."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from wandb_records import history

from stampede.config.checks import ConfigError
from stampede.rundir import checkpoint
from stampede.rundir.files import WANDB_ID_FILE, read_metrics
from stampede.search import pbt

ROOT = Path(__file__).resolve().parents[2]
BOUNDS = {
    "optim.lr": pbt.Bound(1e-4, 3e-3, log=True),
    "vtrace.entropy_cost": pbt.Bound(1e-3, 5e-2, log=True),
    "optim.eps": pbt.Bound(1e-8, 1e-3, log=True),
}


def settings(**changes) -> pbt.Settings:
    values = {
        "members": 4,
        "interval_frames": 100,
        "total_frames": 250,
        "fraction": 0.25,
        "perturb": (0.8, 1.2),
        "resample_probability": 0.25,
        "params": BOUNDS,
        "seed": 3,
    }
    return pbt.Settings(**(values | changes))


def test_rounds_and_replaced_members() -> None:
    s = settings()
    assert s.rounds == 3
    assert [s.round_frames(r) for r in range(3)] == [100, 200, 250]
    assert s.replaced == 1
    assert settings(fraction=0.5, members=5).replaced == 2
    assert settings(fraction=0.0).replaced == 0
    assert settings(members=2).replaced == 1


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"members": 1}, r"hydra.sweeper.members must be >= 2"),
        ({"fraction": 0.7}, r"hydra.sweeper.fraction must be in \[0, 0.5\]"),
        ({"perturb": (0.8, -1.0)}, r"hydra.sweeper.perturb must be positive"),
        ({"resample_probability": 2.0}, r"hydra.sweeper.resample_probability"),
        ({"params": {}}, r"hydra.sweeper.params is empty"),
        ({"params": {"optim.lr": pbt.Bound(0.0, 1.0, log=True)}}, r"params.optim.lr: need low"),
        ({"interval_frames": 0}, r"hydra.sweeper.interval_frames must be > 0"),
    ],
)
def test_bad_settings_are_named(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(**changes)


def test_explore_perturbs_or_redraws_within_bounds() -> None:
    s = settings()
    rng = random.Random(0)
    start = {"optim.lr": 1e-3, "vtrace.entropy_cost": 0.049, "optim.eps": 1e-8}
    perturbed = redrawn = 0
    for _ in range(400):
        new = pbt.explore(start, s, rng)
        for name, value in new.items():
            bound = BOUNDS[name]
            assert bound.low <= value <= bound.high
            ratio = value / start[name]
            moved = [bound.clip(start[name] * f) for f in s.perturb]
            if any(math.isclose(value, m, rel_tol=1e-12) for m in moved):
                perturbed += 1
            else:
                redrawn += 1
                assert not math.isclose(ratio, 1.0)
    # about a quarter of the values are redrawn (resample_probability=0.25)
    assert 0.18 < redrawn / (perturbed + redrawn) < 0.32
    # clipping: 0.049 * 1.2 lands on the bound 0.05
    values = {pbt.explore(start, settings(resample_probability=0.0), rng)["vtrace.entropy_cost"]
              for _ in range(50)}  # fmt: skip
    assert sorted(values) == [pytest.approx(0.049 * 0.8), 0.05]


def test_decide_copies_the_bottom_from_the_top_and_is_repeatable() -> None:
    s = settings(members=5, fraction=0.4)
    params = [{"optim.lr": 1e-3 * (k + 1), "vtrace.entropy_cost": 0.01, "optim.eps": 1e-5}
              for k in range(5)]  # fmt: skip
    scores = [3.0, float("nan"), 10.0, -2.0, 7.0]
    exploits = pbt.decide(scores, params, s, round_=0)
    assert sorted(e["member"] for e in exploits) == [1, 3]  # NaN ranks lowest, then -2
    assert {e["donor"] for e in exploits} <= {2, 4}
    for e in exploits:
        donor = params[e["donor"]]
        for name, value in e["params"].items():
            assert BOUNDS[name].low <= value <= BOUNDS[name].high
            assert value != donor[name] or value in (BOUNDS[name].low, BOUNDS[name].high)
    assert pbt.decide(scores, params, s, round_=0) == exploits  # a restart decides the same
    assert pbt.decide(scores, params, settings(fraction=0.0), round_=0) == []
    # nothing better to copy: a tie (every member at -21 early in Pong), or no game finished
    assert pbt.decide([-21.0] * 5, params, s, round_=0) == []
    assert pbt.decide([math.nan] * 5, params, s, round_=0) == []


def test_population_state_round_trip_and_refuses_another_population(tmp_path: Path) -> None:
    s = settings()
    population = pbt.Population.start(s)
    assert len(population.params) == 4
    for values in population.params:
        assert all(BOUNDS[k].low <= v <= BOUNDS[k].high for k, v in values.items())
    assert population.params[0] != population.params[1]
    population.lineage.append({"round": 0, "member": 2, "frames": 100, "score": 1.0})
    population.round = 1
    population.save(tmp_path)
    again = pbt.Population.load_or_start(tmp_path, settings(total_frames=900))  # may grow
    assert again == population
    assert again.start_frames() == [0, 0, 100, 0]
    lines = (tmp_path / pbt.STATE_DIR / pbt.LINEAGE_FILE).read_text().splitlines()
    assert [json.loads(line) for line in lines] == population.lineage
    with pytest.raises(ConfigError, match=r"holds another population"):
        pbt.Population.load_or_start(tmp_path, settings(members=3))


def test_copy_checkpoint_replaces_the_members_checkpoints(tmp_path: Path) -> None:
    donor, member = tmp_path / "member_0", tmp_path / "member_1"
    checkpoint.save(checkpoint.checkpoint_dir(donor), 100, {"w": torch.ones(3)}, keep=3)
    checkpoint.save(checkpoint.checkpoint_dir(donor), 200, {"w": torch.full((3,), 2.0)}, keep=3)
    checkpoint.save(checkpoint.checkpoint_dir(member), 200, {"w": torch.zeros(3)}, keep=3)
    checkpoint.save(checkpoint.checkpoint_dir(member), 300, {"w": torch.zeros(3)}, keep=3)
    for _ in range(2):  # idempotent
        copied = pbt.copy_checkpoint(donor, member)
        path, state = checkpoint.load_latest(checkpoint.checkpoint_dir(member))
        assert path.name == "ckpt_000000000200.pt"
        assert torch.equal(state["w"], torch.full((3,), 2.0))
        assert [p.name for p in checkpoint.list_checkpoints(path.parent)] == [path.name]
    assert copied["donor_checkpoint"] == "member_0/checkpoints/ckpt_000000000200.pt"
    assert copied["checkpoint"] == "member_1/checkpoints/ckpt_000000000200.pt"
    assert copied["resumes_at"] == 200
    assert copied["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------ a population on CartPole

TINY = [
    "+experiment=pbt_pong",
    "env=cartpole",
    "model=mlp",
    "runtime.num_actors=1",
    "runtime.envs_per_actor=4",
    "runtime.batch_size=8",
    "hydra.sweeper.interval_frames=6000",
    "logger.interval_s=1",
]


def run_pbt(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *TINY, *overrides, f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=sweep_dir.parent,
    )


def _lineage(sweep_dir: Path) -> list[dict]:
    path = sweep_dir / pbt.STATE_DIR / pbt.LINEAGE_FILE
    return [json.loads(line) for line in path.read_text().splitlines()]


def _model(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load_file(path)["model"]


@pytest.mark.timeout(900)
def test_pbt_population_exploits_explores_records_lineage_and_resumes(tmp_path: Path) -> None:
    sweep = tmp_path / "pbt"
    first = run_pbt(sweep, "total_frames=12000")
    assert first.returncode == 0, first.stderr[-3000:]
    rows = _lineage(sweep)
    assert [(r["round"], r["member"]) for r in rows] == [(r, k) for r in (0, 1) for k in range(4)]
    assert all(math.isfinite(r["score"]) for r in rows)
    exploits = [r for r in rows if r["copied_from"] is not None]
    assert [r["round"] for r in exploits] == [
        0
    ]  # one member (fraction 0.25 of 4), not after the last
    [e] = exploits
    member, donor = e["member"], e["copied_from"]
    round0 = {r["member"]: r for r in rows if r["round"] == 0}
    assert round0[member]["score"] == min(r["score"] for r in round0.values())
    assert round0[donor]["score"] == max(r["score"] for r in round0.values())

    # Exploit: the member's checkpoint is the donor's, byte for byte, and it trained on from it.
    copy, source = sweep / e["checkpoint"], sweep / e["donor_checkpoint"]
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == e["sha256"]
    assert copy.read_bytes() == source.read_bytes()
    for name, tensor in _model(source).items():
        assert torch.equal(_model(copy)[name], tensor)
    member_dir = sweep / pbt.member_name(member)
    log = (member_dir / "run.log").read_text()
    assert re.search(rf"resumed from \S*{copy.name}: frames={e['resumes_at']} ", log), log[-2000:]

    # Explore: values moved from the donor's, within bounds; the member trained with them.
    bounds = {
        "optim.lr": (1e-4, 3e-3),
        "vtrace.entropy_cost": (1e-3, 5e-2),
        "optim.eps": (1e-8, 1e-3),
    }
    assert e["donor_params"] == round0[donor]["params"]
    for name, (low, high) in bounds.items():
        assert low <= e["new_params"][name] <= high
        assert e["new_params"][name] != e["donor_params"][name]
    round1 = {r["member"]: r for r in rows if r["round"] == 1}
    assert round1[member]["params"] == e["new_params"]
    after = [r for r in read_metrics(member_dir) if r["env/frames"] > e["resumes_at"]]
    lrs = [r["learner/lr"] for r in after if "learner/lr" in r]
    assert lrs
    assert lrs == pytest.approx([e["new_params"]["optim.lr"]] * len(lrs))

    # Every member: its own run directory, metrics and W&B run; the controller's W&B run has the
    # rounds, the exploit count and the lineage table.
    ids = {(sweep / pbt.member_name(k) / WANDB_ID_FILE).read_text() for k in range(4)}
    assert len(ids) == 4
    for k in range(4):
        assert read_metrics(sweep / pbt.member_name(k))[-1]["env/frames"] >= 12000
        # eval.at_end (the experiment's): once, when the population finished, not every round
        evaluations = (sweep / pbt.member_name(k) / "eval_history.jsonl").read_text().splitlines()
        assert [json.loads(line)["frames"] >= 12000 for line in evaluations] == [True]
    # (one offline run directory per round, all of the same run id: the run is resumed each round)
    files = sorted((sweep / pbt.STATE_DIR / "wandb").glob("offline-run-*/run-*.wandb"))
    run_id = (sweep / pbt.STATE_DIR / WANDB_ID_FILE).read_text().strip()
    assert {f.stem for f in files} == {f"run-{run_id}"}
    logged = [row for f in files for row in history(f) if "pbt/round" in row]
    assert [row["pbt/round"] for row in logged] == [0, 1]
    assert [row["pbt/exploits"] for row in logged] == [1, 0]
    assert [row["pbt/lineage/_type"] for row in logged] == ["table-file"] * 2
    assert [row["pbt/lineage/nrows"] for row in logged] == [4, 8]  # the lineage so far
    printed = first.stdout + first.stderr
    assert f"PBT: {pbt.member_name(member)} copies {pbt.member_name(donor)}" in printed
    assert "PBT done: best member" in printed

    # The controller's state is on disk: the same population with a larger budget continues from
    # round 2 (members resume; the lineage so far is kept).
    again = run_pbt(sweep, "total_frames=18000")
    assert again.returncode == 0, again.stderr[-3000:]
    more = _lineage(sweep)
    assert more[:8] == rows
    assert [(r["round"], r["member"]) for r in more[8:]] == [(2, k) for k in range(4)]
    assert "PBT round 3/3" in again.stdout + again.stderr
    assert "PBT round 1/3" not in again.stdout + again.stderr


def test_pbt_refuses_an_annealed_learning_rate(tmp_path: Path) -> None:
    out = run_pbt(tmp_path / "pbt", "total_frames=12000", "optim.anneal_lr=true")
    assert out.returncode == 2
    assert "stampede: config error: optim.anneal_lr=true: under PBT" in out.stderr
    assert "Traceback" not in out.stderr
    out = run_pbt(tmp_path / "pbt", "optim.lr=0.1")
    assert out.returncode == 2
    assert "optim.lr is evolved by PBT" in out.stderr
    assert not (tmp_path / "pbt" / "member_0").exists()
