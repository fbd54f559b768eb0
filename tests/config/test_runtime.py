"""``runtime.*``: derived values, the default process layout from the CPUs this process may use,
and how ``auto`` resolves inference placement and precision per device."""

from __future__ import annotations

from pathlib import Path

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


# ------------------------------------------------------------------ what the CPU offers bf16

AVX2_EPYC = {"cpu_name": "AMD EPYC", "avx2": True, "avx512_f": False, "avx512_bf16": False}
ZEN4_EPYC = {**AVX2_EPYC, "avx512_f": True, "avx512_bf16": True}


def _cpu(monkeypatch: pytest.MonkeyPatch, capabilities: dict[str, object]) -> None:
    monkeypatch.setattr(runtime_module, "cpu_capabilities", lambda: capabilities)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


def test_bf16_on_a_cpu_without_native_bf16_warns_naming_the_instructions_and_the_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cpu(monkeypatch, AVX2_EPYC)
    cpu = torch.device("cpu")
    assert runtime_module.cpu_bf16_instructions() == ()
    warning = RuntimeConfig(precision="bf16").precision_warning(cpu)
    assert warning is not None
    assert warning.startswith("runtime.precision=bf16 on a CPU without native bf16 instructions")
    for said in ("AMD EPYC", "avx512_bf16", "amx_bf16", "142 vs 1,390 frames/s", "auto or fp32"):
        assert said in warning
    # What the user is told to use does not warn; neither does a GPU.
    for precision in ("auto", "fp32"):
        assert RuntimeConfig(precision=precision).precision_warning(cpu) is None
    assert RuntimeConfig(precision="bf16").precision_warning(torch.device("cuda")) is None


def test_bf16_on_a_cpu_with_avx512_bf16_or_amx_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    _cpu(monkeypatch, ZEN4_EPYC)
    assert runtime_module.cpu_bf16_instructions() == ("avx512_bf16",)
    assert runtime_module.cpu_isa() == "avx512_bf16"
    assert RuntimeConfig(precision="bf16").precision_warning(cpu) is None
    _cpu(monkeypatch, {**ZEN4_EPYC, "amx_bf16": True})
    assert runtime_module.cpu_isa() == "amx_bf16"  # the best one first


@pytest.mark.parametrize(
    ("limit", "native"),
    [("AVX2", False), ("avx512_core", False), ("AVX512_CORE_BF16", True), ("ALL", True)],
)
def test_a_onednn_cap_below_bf16_makes_bf16_emulated(
    limit: str, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONEDNN_MAX_CPU_ISA caps the kernels that would compute bf16: under AVX2 the DQN network's
    bf16 step ran 9x slower than fp32 on an AVX-512 BF16 CPU."""
    _cpu(monkeypatch, ZEN4_EPYC)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", limit)
    warning = RuntimeConfig(precision="bf16").precision_warning(torch.device("cpu"))
    assert (warning is None) == native
    assert runtime_module.cpu_isa().endswith(f" onednn:{limit.lower()}")


def test_the_cpuinfo_fallback_reads_what_torch_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``torch.cpu.get_capabilities`` (torch < 2.10) the flags come from /proc/cpuinfo,
    under the same names."""
    if not hasattr(torch.cpu, "get_capabilities") or not Path("/proc/cpuinfo").exists():
        pytest.skip("needs torch.cpu.get_capabilities and /proc/cpuinfo to compare")
    torch_says = torch.cpu.get_capabilities()
    monkeypatch.delattr(torch.cpu, "get_capabilities")
    cpuinfo_says = runtime_module.cpu_capabilities.__wrapped__()
    names = [n for n in ("avx2", "avx512_bf16", "amx_bf16", "sse4_2") if n in torch_says]
    assert {n: cpuinfo_says.get(n, False) for n in names} == {n: torch_says[n] for n in names}
    assert cpuinfo_says["cpu_name"]
