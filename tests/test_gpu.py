"""The CUDA path: skipped cleanly without a GPU; `benchmarks/gpu_check.sh` runs these on one.

What a GPU user relies on: the learner's update on the GPU is the CPU's update (same loss, same
step, up to float rounding), and a real training run with ``device=cuda`` (actors inferring on
the GPU, parameters published through CUDA IPC) trains, checkpoints and resumes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stampede.config import OptimConfig, VTraceConfig
from stampede.learner import Learner
from stampede.models import AtariNet

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ROOT = Path(__file__).resolve().parents[1]
T, B, A = 6, 4, 5


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randint(0, 256, (T + 1, B, 4, 84, 84), generator=g, dtype=torch.uint8),
        "reward": torch.randn(T + 1, B, generator=g),
        "done": torch.rand(T + 1, B, generator=g) < 0.1,
        "last_action": torch.randint(0, A, (T + 1, B), generator=g),
        "action": torch.randint(0, A, (T + 1, B), generator=g),
        "logits": torch.randn(T + 1, B, A, generator=g),
    }


def _updated(device: str) -> tuple[list[torch.Tensor], dict[str, float]]:
    torch.manual_seed(0)
    model = AtariNet((4, 84, 84), A).to(device)
    optim = OptimConfig(name="adam", lr=1e-3, anneal_lr=False, epochs=2, minibatches=1)
    learner = Learner(model, VTraceConfig(), optim, total_frames=10_000)
    metrics = learner.update({k: v.to(device) for k, v in _batch().items()}, frames=0)
    return [p.detach().cpu() for p in model.parameters()], metrics


def test_learner_update_on_cuda_matches_cpu() -> None:
    on_cpu, cpu_metrics = _updated("cpu")
    on_cuda, cuda_metrics = _updated("cuda")
    for a, b in zip(on_cpu, on_cuda, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-5)
    assert cuda_metrics["loss/total"] == pytest.approx(cpu_metrics["loss/total"], rel=1e-3)


def test_training_on_cuda_runs_and_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    base = [
        sys.executable,
        str(ROOT / "run.py"),
        f"hydra.run.dir={run_dir}",
        "device=cuda",
        "env=pong",
        "runtime.num_actors=2",
        "runtime.envs_per_actor=4",
        "runtime.batch_size=8",
        "logger.wandb.mode=disabled",
    ]
    for frames in (20_000, 40_000):
        proc = subprocess.run(
            [*base, f"total_frames={frames}"], capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    assert last["env/frames"] >= 40_000
    assert "resumed from" in (run_dir / "run.log").read_text()
