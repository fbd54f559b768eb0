"""The CUDA path: skipped cleanly without a GPU; `benchmarks/gpu_check.sh` runs these on one.

What a GPU user relies on: the learner's update on the GPU is the CPU's update (same loss, same
step, up to float rounding), and a real training run with ``device=cuda`` (actors inferring on
the GPU, parameters published through CUDA IPC) trains, checkpoints and resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from stampede.config.schema import OptimConfig, VTraceConfig
from stampede.envs import EnvSpec
from stampede.models import AtariNet
from stampede.train import buffers
from stampede.train.buffers import RolloutBuffers, rollout_spec
from stampede.train.learner import Learner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ROOT = Path(__file__).resolve().parents[2]
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


# TF1-style RMSProp starts its mean square at 1, so its first steps are about lr * gradient: float
# rounding in the gradient (cuDNN's TF32 convolutions on CUDA, bf16) stays rounding in the step.
# Adam's first step is about lr * sign(gradient), which turns rounding in a near-zero gradient into
# a step of 2 lr the other way (seen on an H200: 5.5% of a conv weight's elements 2.2e-3 apart).
LINEAR_STEP = OptimConfig(
    name="rmsprop", lr=1e-3, eps=0.01, anneal_lr=False, epochs=2, minibatches=1
)


def _updated(
    device: str, precision: str = "fp32"
) -> tuple[list[torch.Tensor], torch.Tensor, dict[str, float]]:
    """The parameters after one update (2 passes) of a seeded AtariNet on `_batch`, the change
    that update made to all parameters as one vector, and the update's metrics."""
    torch.manual_seed(0)
    model = AtariNet((4, 84, 84), A).to(device)
    before = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    learner = Learner(model, VTraceConfig(), LINEAR_STEP, 10_000, precision=precision)
    metrics = learner.update({k: v.to(device) for k, v in _batch().items()}, frames=0)
    after = [p.detach().cpu() for p in model.parameters()]
    return after, torch.cat([p.flatten() for p in after]) - before, metrics


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


def test_learner_update_on_cuda_matches_cpu() -> None:
    """Up to the rounding of cuDNN's TF32 convolutions (torch's default on CUDA): on an H200 50
    of 663,552 elements of the FC layer were more than 1e-5 apart, the largest 2.7e-5."""
    on_cpu, cpu_step, cpu_metrics = _updated("cpu")
    on_cuda, cuda_step, cuda_metrics = _updated("cuda")
    for a, b in zip(on_cpu, on_cuda, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)  # steps reach 3.5e-3
    assert _cosine(cuda_step, cpu_step) > 0.999
    assert cuda_metrics["loss/total"] == pytest.approx(cpu_metrics["loss/total"], rel=1e-3)


def test_bf16_update_on_cuda_is_close_to_fp32() -> None:
    """bf16 autocast keeps fp32 parameters and moves them the way fp32 does (on this project's
    CPU the same check gives a cosine of 0.9992 and a step norm 0.1% apart)."""
    _, fp32_step, expected = _updated("cuda", "fp32")
    bf16, bf16_step, metrics = _updated("cuda", "bf16")
    assert metrics["loss/total"] == pytest.approx(expected["loss/total"], rel=0.05, abs=0.05)
    assert all(p.dtype == torch.float32 for p in bf16)
    assert _cosine(bf16_step, fp32_step) > 0.99
    assert bf16_step.norm().item() == pytest.approx(fp32_step.norm().item(), rel=0.05)


def test_a_nonfinite_update_on_cuda_changes_nothing() -> None:
    """torch Adam keeps its step counts on the CPU for CUDA parameters: put back after the read.
    One minibatch per pass, so the bad trajectory is in the first step (with several, the steps
    on minibatches before it are kept: tests/train/test_learner.py)."""
    torch.manual_seed(0)
    model = AtariNet((4, 84, 84), A).to("cuda")
    optim = OptimConfig(name="adam", lr=1e-3, anneal_lr=False, epochs=2, minibatches=1)
    learner = Learner(model, VTraceConfig(), optim, total_frames=10_000)
    learner.update({k: v.cuda() for k, v in _batch().items()}, frames=0)
    state = learner.optimizer.state
    before = [p.detach().clone() for p in model.parameters()]
    before_state = [{k: v.clone() for k, v in state[p].items()} for p in model.parameters()]
    bad = {k: v.cuda() for k, v in _batch().items()}
    bad["reward"][1, 0] = float("nan")
    learner.update(bad, frames=0)
    assert (learner.skipped, learner.last_nonfinite) == (1, "loss/pg is nan")
    for p, b, s in zip(model.parameters(), before, before_state, strict=True):
        assert torch.equal(p, b)
        for k, v in state[p].items():
            assert torch.equal(v, s[k]), k


def _filled_buffers(slots: int, unroll: int, envs: int) -> RolloutBuffers:
    env = EnvSpec((4, 84, 84), np.dtype(np.uint8), A, 4)
    bufs = RolloutBuffers(rollout_spec(env, unroll, envs, [(1, envs, 8), (1, envs, 8)]), slots)
    g = torch.Generator().manual_seed(0)
    for t in bufs.tensors.values():
        if t.dtype == torch.bool:
            t.copy_(torch.rand(t.shape, generator=g) < 0.5)
        elif t.dtype.is_floating_point:
            t.copy_(torch.randn(t.shape, generator=g, dtype=t.dtype))
        else:
            t.copy_(torch.randint(0, 200, t.shape, generator=g, dtype=t.dtype))
    return bufs


def _assert_same_batch(on_cuda: dict[str, torch.Tensor], on_cpu: dict[str, torch.Tensor]) -> None:
    assert list(on_cuda) == list(on_cpu)
    for name, t in on_cpu.items():
        expected_device = "cpu" if name in buffers.PER_SLOT else "cuda"
        assert on_cuda[name].device.type == expected_device, name
        assert on_cuda[name].dtype == t.dtype, name
        assert torch.equal(on_cuda[name].cpu(), t), name


def test_a_cuda_gather_is_the_cpu_gather_of_the_same_slots() -> None:
    """Through pinned staging and a copy stream: the same batch as on the CPU, also when the
    staging is reused (the first batch must not change under the second gather) and when the
    copy is made in another thread and waited for in this one (the batch feed's way)."""
    bufs = _filled_buffers(slots=6, unroll=5, envs=3)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    first = bufs.gather([4, 1], cuda)
    second = bufs.gather([0, 5], cuda)
    _assert_same_batch(first, bufs.gather([4, 1], cpu))
    _assert_same_batch(second, bufs.gather([0, 5], cpu))
    made = []
    thread = threading.Thread(target=lambda: made.append(bufs.gather_async([2, 3], cuda)))
    thread.start()
    thread.join()
    batch, copied = made[0]
    assert copied is not None
    _assert_same_batch(buffers.ready(batch, copied), bufs.gather([2, 3], cpu))


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


# ------------------------------------------------------------------ central inference on CUDA


def test_the_server_answers_on_cuda_as_the_model_does_on_the_cpu() -> None:
    """Requests of two actors served by one forward on the GPU (the published model's own
    tensors), in fp32 and bf16: the CPU model's logits, up to rounding."""
    import torch.multiprocessing as mp

    from stampede.train.inference import ServerSetup, _Server
    from stampede.train.requests import RequestTable

    torch.manual_seed(0)
    cpu_model = AtariNet((4, 84, 84), A)
    spec = EnvSpec((4, 84, 84), np.dtype(np.uint8), A, 4)
    for precision, tol in (("fp32", 1e-3), ("bf16", 5e-2)):
        table = RequestTable(mp.get_context("spawn"), spec, 2, 4, 2, [])
        g = torch.Generator().manual_seed(1)
        obs = torch.randint(0, 256, (8, 4, 84, 84), generator=g, dtype=torch.uint8)
        last_action = torch.randint(0, A, (8,), generator=g)
        reward, done = torch.randn(8, generator=g), torch.zeros(8, dtype=torch.bool)
        for actor in range(2):
            client = table.client(actor)
            for group, (lo, hi) in enumerate(table.groups):
                rows = slice(actor * 4 + lo, actor * 4 + hi)
                x = (obs[rows], last_action[rows], reward[rows], done[rows])
                client.request(group, x, torch.zeros(hi - lo, dtype=torch.long), ())
        setup = ServerSetup("cuda", 1.0, 0, 0.0, 1, precision)
        server = _Server(setup, cpu_model.to("cuda"), table)
        server._answer(*server._wait())
        cpu_model.to("cpu")
        assert table.stats()[0] == {"forwards": 1, "requests": 4, "observations": 8}
        with torch.no_grad():
            out = cpu_model(obs[None], last_action[None], reward.clamp(-1, 1)[None], done[None], ())
        torch.testing.assert_close(table.logits, out.policy_logits[0], rtol=tol, atol=tol)


def _gpu_pids() -> set[int] | None:
    """PIDs with a CUDA context on the GPUs (nvidia-smi), or None without nvidia-smi."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {int(line) for line in out.split() if line.strip().isdigit()}


def test_central_inference_on_cuda_trains_and_only_learner_and_server_hold_the_gpu(
    tmp_path: Path,
) -> None:
    """``device=cuda`` with the default placement (auto: central): 4 actors step their envs
    without a CUDA context; the learner and the inference server are the GPU's only processes."""
    import re
    import signal
    import time

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run.py"),
            f"hydra.run.dir={run_dir}",
            "device=cuda",
            "env=pong",
            "runtime.num_actors=4",
            "runtime.envs_per_actor=4",
            "runtime.batch_size=16",
            "logger.interval_s=2",
            "logger.wandb.mode=disabled",
            "total_frames=100000000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not metrics.exists() or len(metrics.read_text().splitlines()) < 3:
            assert time.monotonic() < deadline, "no metrics"
            assert proc.poll() is None, "the run ended"
            time.sleep(1)
        log = (run_dir / "run.log").read_text()
        assert "inference central on cuda" in log
        server = int(re.findall(r"inference server started \(pid (\d+)\)", log)[0])
        pids = _gpu_pids()
        if pids is not None:  # inside some containers nvidia-smi lists no pids at all
            # This test's own process holds a context too once an earlier test used CUDA.
            assert pids - {os.getpid()} <= {proc.pid, server}, pids
        last = json.loads(metrics.read_text().splitlines()[-1])
        assert last["inference/batch_mean"] > 4  # more than one group per forward
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
