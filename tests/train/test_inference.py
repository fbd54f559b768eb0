"""Central batched inference (stampede.train.inference, ``runtime.inference=central``): the
server's batching, the LSTM state it carries, and whole runs where the actors hold no model.

The server is driven in a thread of the test process for the protocol tests (the same code as
its own process runs), so what it answered can be compared with the model's own forward pass.
"""

from __future__ import annotations

import dataclasses
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from conftest import CARTPOLE, ROOT, run_py, wait_for

from stampede.models import MLP
from stampede.report import curves as learning_curve
from stampede.rundir.files import read_metrics
from stampede.train.actor import LocalPolicy
from stampede.train.inference import _Server

from .conftest import OBS, SETUP, A, inputs, serving, table


def test_the_server_answers_every_actor_in_one_forward_as_the_model_would() -> None:
    """Six requests (3 actors x 2 groups) waiting: one forward of 12 observations, and each
    group gets the logits the model gives its own inputs."""
    torch.manual_seed(0)
    model = MLP((OBS,), A)
    t = table(model, actors=3, envs=4, groups=2)
    clients = [t.client(a) for a in range(3)]
    posted = {}
    for a, client in enumerate(clients):
        for g, (lo, hi) in enumerate(t.groups):
            posted[a, g] = inputs(hi - lo, seed=10 * a + g)
            client.request(g, posted[a, g], torch.zeros(hi - lo, dtype=torch.long), ())
    server = _Server(SETUP, model, t)
    seen, pending = server._wait()
    server._answer(seen, pending)
    counters, _, _ = t.stats()
    assert counters == {"forwards": 1, "requests": 6, "observations": 12}
    for (a, g), (obs, last_action, reward, done) in posted.items():
        action, logits, core = clients[a].result(g)
        with torch.no_grad():
            out = model(obs[None], last_action[None], reward.clamp(-1, 1)[None], done[None], ())
        torch.testing.assert_close(logits, out.policy_logits[0])
        assert action.shape == (2,)
        assert core == ()
        assert ((action >= 0) & (action < A)).all()


def test_a_batch_limit_splits_the_waiting_requests_into_several_forwards() -> None:
    model = MLP((OBS,), A)
    t = table(model, actors=4, envs=2, groups=1)
    clients = [t.client(a) for a in range(4)]
    for a, client in enumerate(clients):
        client.request(0, inputs(2, seed=a), torch.zeros(2, dtype=torch.long), ())
    server = _Server(dataclasses.replace(SETUP, max_batch=4), model, t)
    with serving(server):
        for client in clients:
            assert client.result(0) is not None
    counters, _, _ = t.stats()
    assert counters["requests"] == 4
    assert counters["observations"] == 8
    assert counters["forwards"] == 2  # 4 observations each


def test_the_lstm_state_travels_with_the_requests_and_resets_at_episode_starts() -> None:
    """Ten steps of two groups through the server give the logits and LSTM states of the
    actor's own forward pass (``LocalPolicy``), episode starts (done) included."""
    torch.manual_seed(0)
    model = MLP((OBS,), A, use_lstm=True, hidden_size=8)
    t = table(model, actors=1, envs=4, groups=2)
    client, local = t.client(0), LocalPolicy(model, torch.device("cpu"), reward_clip=1.0)
    states = {g: model.initial_state(2) for g in range(2)}
    expected = dict(states)
    with serving(_Server(SETUP, model, t)):
        for step in range(10):
            for g in range(2):
                x = inputs(2, seed=100 * step + g)
                task = torch.zeros(2, dtype=torch.long)
                client.request(g, x, task, states[g])
                local.request(g, x, task, expected[g])
                _, logits, states[g] = client.result(g)
                _, want, expected[g] = local.result(g)
                torch.testing.assert_close(logits, want)
                for s, e in zip(states[g], expected[g], strict=True):
                    torch.testing.assert_close(s, e)


# ------------------------------------------------------------------------- whole runs

CARTPOLE_CENTRAL = [*CARTPOLE, "runtime.inference=central"]  # conftest's CartPole recipe


def test_cartpole_learns_with_central_inference(tmp_path: Path) -> None:
    """As test_train's CartPole test, through the server: the games of the last 40k of 200k
    frames score at least 3x the first 20 (random play: about 22); the server batched the
    requests of both actors (more than one request per forward on average)."""
    run_dir = tmp_path / "run"
    proc = run_py(run_dir, *CARTPOLE_CENTRAL, "total_frames=200000")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (run_dir / "run.log").read_text()
    assert "inference central on cpu" in log
    frames, _, returns = learning_curve.episodes(run_dir)
    late = returns[frames > 160_000]
    assert len(late) >= 20
    assert late.mean() >= 3 * returns[:20].mean(), (returns[:20].mean(), late.mean())
    rows = [r for r in read_metrics(run_dir) if "inference/requests_per_forward" in r]
    assert rows
    assert np.mean([r["inference/requests_per_forward"] for r in rows]) > 1.0
    stages = [k for k in rows[-1] if k.startswith("time/inference/")]
    assert sorted(stages) == sorted(
        f"time/inference/{s}" for s in ("wait", "gather", "forward", "reply")
    )
    assert sum(rows[-1][k] for k in stages) <= 1.0 + 1e-6


def _children(pid: int) -> list[psutil.Process]:
    runner = psutil.Process(pid)  # actors and the server are forked by its forkserver child
    return [c for c in runner.children(recursive=True) if c.ppid() != runner.pid]


@pytest.mark.parametrize("victim", ["actor", "server"])
def test_a_killed_actor_or_server_is_replaced_and_training_goes_on(
    victim: str, tmp_path: Path
) -> None:
    """SIGKILL, most likely while it waits for or serves a request: the pool replaces it, the
    other actors are not stalled, and the frames keep rising."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run.py"),
            f"hydra.run.dir={run_dir}",
            *CARTPOLE_CENTRAL,
            "runtime.envs_per_actor=2",
            "runtime.batch_size=4",
            "total_frames=100000000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        wait_for(lambda: len(read_metrics(run_dir)) >= 2, 60, "metrics")
        server_pid = int(
            re.findall(
                r"inference server started \(pid (\d+)\)", (run_dir / "run.log").read_text()
            )[0]
        )
        children = _children(proc.pid)
        assert server_pid in {c.pid for c in children}
        if victim == "server":
            psutil.Process(server_pid).kill()
        else:
            next(c for c in children if c.pid != server_pid).kill()

        def replaced() -> bool:
            if victim == "server":
                return "restarting the inference server" in (run_dir / "run.log").read_text()
            return read_metrics(run_dir)[-1].get("actors/restarts", 0) >= 1

        wait_for(replaced, 60, f"the {victim}'s replacement")
        frames = read_metrics(run_dir)[-1]["env/frames"]
        wait_for(
            lambda: read_metrics(run_dir)[-1]["env/frames"] > frames + 2000,
            60,
            "training after the replacement",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
