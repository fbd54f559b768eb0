"""The processes of one learner rank (stampede.train.processes): the rollout slots, which process
gets the network, each actor's tasks, and the layout line the run log starts with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from conftest import ROOT

from stampede.config.compose import load_config
from stampede.config.runtime import RuntimeConfig, cpu_isa, usable_cpus
from stampede.envs import EnvSpec
from stampede.models import MLP
from stampede.train import processes
from stampede.train.requests import RequestTable
from stampede.train.trainer import Trainer

CPU = torch.device("cpu")


def test_actors_hold_no_model_with_central_inference(tmp_path: Path, monkeypatch) -> None:
    """Each actor process is given the request table, not the network; the server the network."""
    started: dict[str, tuple] = {}  # process name -> the arguments it was started with
    real = processes.actor_context()

    class Recording:
        def __getattr__(self, name: str):
            return getattr(real, name)

        def Process(self, **kwargs):  # noqa: N802 (multiprocessing's name)
            started[kwargs["name"]] = kwargs["args"]
            return real.Process(**kwargs)

    monkeypatch.setattr(processes, "actor_context", Recording)
    cfg = load_config(
        ROOT / "conf",
        [
            "env=cartpole",
            "model=mlp",
            "runtime.inference=central",
            "runtime.num_actors=2",
            "runtime.envs_per_actor=4",
            "runtime.batch_size=8",
            "logger.wandb.mode=disabled",
        ],
    )
    pool = Trainer(cfg, tmp_path)._start_actors()
    pool.stop()
    assert sorted(started) == ["actor-0", "actor-1", "inference-server"]
    for name, args in started.items():
        has_model = any(isinstance(a, torch.nn.Module) for a in args)
        assert has_model == (name == "inference-server"), name
        assert any(isinstance(a, RequestTable) for a in args), name


def test_the_rollout_slots_hold_t_plus_1_steps_of_an_actors_envs() -> None:
    r = RuntimeConfig(num_actors=3, envs_per_actor=4, batch_size=8, unroll_length=5)
    spec = EnvSpec((6,), np.dtype(np.uint8), 7, 4)
    model = MLP((6,), 7, use_lstm=True, hidden_size=16)
    buffers = processes.rollout_buffers(r, spec, model)
    assert buffers.num_slots == r.buffer_slots == 3  # one per actor, at least one batch (2)
    slot = buffers.slot(0)
    assert slot["obs"].shape == (6, 4, 6)
    assert slot["obs"].dtype == torch.uint8
    assert slot["logits"].shape == (6, 4, 7)
    # the LSTM state before row 0 of each env: (h, c), [layers, E, H]
    assert [slot[k].shape for k in ("core_state_0", "core_state_1")] == [(1, 4, 16)] * 2
    assert "core_state_0" not in processes.rollout_buffers(r, spec, MLP((6,), 7)).slot(0)


def test_each_actor_gets_the_tasks_of_its_env_slots() -> None:
    r = RuntimeConfig(num_actors=2, envs_per_actor=3, batch_size=3)
    slot_tasks = [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 1, 2]  # 2 ranks x 2 actors x 3 envs
    assert processes.actor_tasks(slot_tasks, r, rank=0, actor_id=1) == (1, 1, 1)
    assert processes.actor_tasks(slot_tasks, r, rank=1, actor_id=0) == (2, 2, 2)
    assert processes.actor_tasks(slot_tasks, r, rank=1, actor_id=1) == (0, 1, 2)
    assert processes.actor_tasks(None, r, rank=1, actor_id=1) == ()  # a single-game run


def test_the_layout_line_names_every_process() -> None:
    r = RuntimeConfig(num_actors=3, envs_per_actor=2, batch_size=4, learner_threads=2)
    assert processes.layout(r, CPU) == (
        f"3 actors x 2 envs (1 thread(s) each), inference in each actor on cpu {cpu_isa()} "
        f"(fp32), learner on cpu {cpu_isa()} (fp32, 2 thread(s)), {usable_cpus()} usable CPUs"
    )
    central = RuntimeConfig(
        num_actors=3, envs_per_actor=2, batch_size=4, inference="central", inference_threads=2
    )
    assert f"inference central on cpu {cpu_isa()} (fp32, 2 thread(s))" in processes.layout(
        central, CPU
    )
