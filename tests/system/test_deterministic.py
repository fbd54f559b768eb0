"""``runtime.deterministic=true``: two CartPole runs with one seed learn bit for bit the same (the
same losses in metrics.jsonl, the same training digest of the final checkpoint); another seed
learns differently."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import CARTPOLE, run_py

from stampede.rundir import checkpoint
from stampede.rundir.checkpoint_state import training_digest

# Several passes of two minibatches over every batch: the seeded splits are part of what repeats.
DETERMINISTIC = [
    *CARTPOLE,
    "runtime.deterministic=true",
    "runtime.prefetch=false",
    "optim.epochs=2",
    "optim.minibatches=2",
    "total_frames=10240",
]


def _trained(run_dir: Path, seed: int) -> tuple[list[dict[str, float]], str]:
    """(the loss/* values of every metric line, the final checkpoint's training digest)."""
    result = run_py(run_dir, *DETERMINISTIC, f"seed={seed}")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [{k: v for k, v in line.items() if k.startswith("loss/")} for line in lines]
    found = checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir))
    assert found is not None
    _, state = found
    assert state["frames"] >= 10240
    return losses, training_digest(state)


def test_same_seed_same_run_and_another_seed_another(tmp_path: Path) -> None:
    losses_a, digest_a = _trained(tmp_path / "a", seed=7)
    losses_b, digest_b = _trained(tmp_path / "b", seed=7)
    losses_c, digest_c = _trained(tmp_path / "c", seed=8)
    assert len(losses_a) >= 2  # a line every 10 updates
    assert all(line for line in losses_a)
    assert losses_a == losses_b
    assert digest_a == digest_b
    assert losses_c != losses_a
    assert digest_c != digest_a
