"""``runtime.*``: derived values, the default process layout from the CPUs this process may use,
and how ``auto`` resolves inference placement and precision per device."""

from __future__ import annotations

import pytest
import torch

from stampede.config import runtime as runtime_module
from stampede.config.runtime import RuntimeConfig


def test_derived_values_are_properties() -> None:
    r = RuntimeConfig(num_actors=3, envs_per_actor=8, batch_size=32)
    assert r.slots_per_batch == 4
    assert r.buffer_slots == max(3, 4)  # no prefetch (the default): one per actor, a batch
    assert RuntimeConfig(num_actors=3, batch_size=32, prefetch=True).buffer_slots == 2 * 3 + 4


@pytest.mark.parametrize(
    ("cpus", "actors", "learner_threads"),
    [(1, 1, 1), (2, 2, 2), (4, 4, 4), (16, 14, 2), (64, 62, 2)],
)
def test_the_default_layout_follows_the_cpus(
    cpus: int, actors: int, learner_threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to 4 CPUs: an actor per CPU, the learner on all of them; above: 2 CPUs kept for the
    learner and the inference server, the rest actors. Explicit values win."""
    monkeypatch.setattr(runtime_module, "usable_cpus", lambda: cpus)
    r = RuntimeConfig()
    assert (r.actors, r.learner_torch_threads) == (actors, learner_threads)
    assert RuntimeConfig(num_actors=3, learner_threads=5).actors == 3
    assert RuntimeConfig(num_actors=3, learner_threads=5).learner_torch_threads == 5


def test_placement_and_precision_resolve_auto_per_device() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    r = RuntimeConfig()
    assert (r.placement(cpu), r.placement(cuda)) == ("actor", "central")
    assert r.resolved_precision(cpu) == "fp32"  # bf16 on a CPU is opt-in
    for placement in ("actor", "central"):
        assert RuntimeConfig(inference=placement).placement(cuda) == placement
    assert RuntimeConfig(precision="bf16").resolved_precision(cpu) == "bf16"


def test_a_deterministic_run_acts_in_the_actors_and_refuses_what_depends_on_timing() -> None:
    r = RuntimeConfig(deterministic=True)
    assert r.placement(torch.device("cuda")) == "actor"  # auto: no central server's batches
    for key, value in (("prefetch", True), ("inference", "central")):
        with pytest.raises(ValueError, match=rf"runtime\.{key}={value} cannot be reproduced"):
            RuntimeConfig(deterministic=True, **{key: value})
