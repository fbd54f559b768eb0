"""``runtime.*``: processes, batching and placement (``RuntimeConfig``), and what the machine
offers them (``usable_cpus``; the CPU's instruction set, ``cpu_isa``, and whether it computes
bf16 natively, ``cpu_bf16_instructions``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from stampede.config.checks import ConfigError, positive_int, require


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask (a SLURM allocation, ``taskset``), not
    every core of the machine."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


# The CPU instructions that compute bf16 natively (x86: AVX-512 BF16, AMX; ARM: its BF16
# extension). Without one, autocast to bf16 on the CPU is emulated in fp32 arithmetic plus
# conversions: `python run.py env=pong runtime.precision=bf16` ran at 142 frames/s against 1,390
# in fp32 on a 2-core AVX2 AMD EPYC, and at 202 against 1,300 on an AVX-512 BF16 EPYC with
# oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2).
BF16_INSTRUCTIONS = ("amx_bf16", "avx512_bf16", "sve_bf16", "bf16")
EMULATED_BF16_COST = "7-10x slower than fp32 on Pong (142 vs 1,390 frames/s on a 2-core AVX2 EPYC)"


@functools.cache
def cpu_capabilities() -> Mapping[str, Any]:
    """The CPU's features by name (``avx2``, ``avx512_bf16``, ``amx_bf16``, ``cpu_name``, ...):
    torch's own query (``torch.cpu.get_capabilities``, torch >= 2.10), else the flags of
    /proc/cpuinfo, which use the same names (empty where neither exists)."""
    query = getattr(torch.cpu, "get_capabilities", None)
    if query is not None:
        return query()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return {}
    found: dict[str, Any] = {}
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features"):  # x86, ARM
            found.update(dict.fromkeys(value.split(), True))
        elif key in ("model name", "CPU part") and "cpu_name" not in found:
            found["cpu_name"] = value.strip()
    return found


def onednn_isa_limit() -> str | None:
    """``ONEDNN_MAX_CPU_ISA`` (or its old name ``DNNL_MAX_CPU_ISA``), which caps the instruction
    set of oneDNN's kernels (the convolutions and matrix products), upper case; None if unset."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        value = os.environ.get(name, "").strip().upper()
        if value:
            return value
    return None


def cpu_bf16_instructions() -> tuple[str, ...]:
    """The native bf16 instruction sets this CPU's kernels may use (``BF16_INSTRUCTIONS`` it
    has), best first; () where bf16 would be emulated, as on a CPU without them or under a
    oneDNN cap below them (``ONEDNN_MAX_CPU_ISA=AVX2``: oneDNN's AVX2 kernels emulate bf16, and
    measured 9x slower than fp32 on the DQN network on an AVX-512 BF16 CPU)."""
    limit = onednn_isa_limit()
    if (
        limit is not None
        and limit != "ALL"
        and not any(
            part in limit
            for part in ("BF16", "AMX", "FP16", "AVX10")  # oneDNN's sets that hold it
        )
    ):
        return ()
    capabilities = cpu_capabilities()
    return tuple(name for name in BF16_INSTRUCTIONS if capabilities.get(name) is True)


def cpu_isa() -> str:
    """What the CPU kernels run on, for the layout line and benchmarks: torch's vector
    capability (``avx2``, ``avx512``, ``default``), or its best native bf16 set where it has
    one (``avx512_bf16``, ``amx_bf16``); a oneDNN cap follows (``avx512 onednn:avx2``)."""
    native = cpu_bf16_instructions()
    isa = native[0] if native else torch.backends.cpu.get_cpu_capability().lower()
    limit = onednn_isa_limit()
    return isa if limit is None else f"{isa} onednn:{limit.lower()}"


def cpu_name() -> str:
    """The CPU's model name (``AMD EPYC``), or the architecture where it is not known."""
    return str(cpu_capabilities().get("cpu_name") or os.uname().machine)


INFERENCE = ("auto", "actor", "central")
PRECISIONS = ("auto", "fp32", "bf16")
# Up to this many usable CPUs, one actor per CPU (measured fastest on 2 cores); above it the
# defaults keep RESERVED_CPUS for the learner and the inference server.
SMALL_MACHINE_CPUS = 4
RESERVED_CPUS = 2


@dataclass
class RuntimeConfig:
    """Processes and batching. Each actor steps ``envs_per_actor`` environments as one batch and
    fills one rollout slot of shape [unroll_length + 1, envs_per_actor]; the learner takes
    ``batch_size / envs_per_actor`` slots per update.

    ``inference`` places the acting policy: ``actor`` (each actor process runs its own forward
    pass), ``central`` (one inference server per learner batches the requests of all actors,
    ``stampede.train.inference``), or ``auto`` (central on CUDA, actor on CPU, where it measured
    faster: README, "Benchmark").

    ``deterministic`` makes a run on a given machine bit-identical for a given seed (README,
    "Reproducible runs"): the actors work in lock-step with the learner (each batch's slots are
    handed out only after the previous update is published, and are learned from in the order
    they were handed out), torch uses deterministic algorithms, and the acting policy runs in
    the actors (a central server's batches depend on timing). It costs the overlap of acting and
    learning."""

    num_actors: int = 0  # 0 = one per usable CPU, less RESERVED_CPUS above SMALL_MACHINE_CPUS
    envs_per_actor: int = 8
    batch_size: int = 32
    unroll_length: int = 32  # the paper's 20 in +experiment=impala_paper
    num_buffers: int = 0  # rollout slots; 0 = auto (see buffer_slots)
    prefetch: bool = (
        False  # true: gather the next batch during an update (false: after it, fresher)
    )
    learner_threads: int = 0  # torch threads in the learner; 0 = every CPU it may use
    actor_threads: int = 1  # torch threads in each actor process
    max_actor_restarts: int = 10  # actor failures tolerated within actor_restart_window_s
    actor_restart_window_s: float = 600.0
    actor_timeout_s: float = 120.0  # an actor holding one rollout slot longer is hung
    max_nonfinite_updates: int = 10  # consecutive skipped (NaN/inf) updates that stop the run
    inference: str = "auto"  # auto | actor | central (see the class docstring)
    inference_batch: int = 0  # central: most observations per forward; 0 = every waiting one
    inference_wait_ms: float = 2.0  # central: longest wait for more requests after the first
    inference_threads: int = 1  # central: torch threads of the inference server
    inference_groups: int = 2  # central: env groups per actor (one steps while one waits)
    precision: str = "auto"  # auto | fp32 | bf16: the network's autocast (see resolved_precision)
    compile: bool = False  # torch.compile the learner's network
    cuda_graph: bool = False  # each learner minibatch step one CUDA graph (stampede.train.graphed)
    deterministic: bool = False  # bit-identical runs for a seed (lock-step; see the docstring)

    def __post_init__(self) -> None:
        require(
            self.num_actors >= 0,
            "runtime.num_actors",
            self.num_actors,
            "a positive integer, or 0 for one per CPU core",
        )
        for key in ("envs_per_actor", "batch_size", "unroll_length"):
            positive_int(f"runtime.{key}", getattr(self, key))
        if self.batch_size % self.envs_per_actor:
            raise ConfigError(
                f"runtime.batch_size must be a multiple of runtime.envs_per_actor (each actor "
                f"hands over {self.envs_per_actor} trajectories at once), got "
                f"batch_size={self.batch_size}, envs_per_actor={self.envs_per_actor}"
            )
        for key in ("num_buffers", "learner_threads"):
            require(getattr(self, key) >= 0, f"runtime.{key}", getattr(self, key), ">= 0")
        positive_int("runtime.actor_threads", self.actor_threads)
        require(
            self.max_actor_restarts >= 0,
            "runtime.max_actor_restarts",
            self.max_actor_restarts,
            ">= 0",
        )
        for key in ("actor_restart_window_s", "actor_timeout_s"):
            require(getattr(self, key) > 0, f"runtime.{key}", getattr(self, key), "> 0")
        positive_int("runtime.max_nonfinite_updates", self.max_nonfinite_updates)
        for key, allowed in (("inference", INFERENCE), ("precision", PRECISIONS)):
            value = getattr(self, key)
            require(value in allowed, f"runtime.{key}", value, f"one of {allowed}")
        require(self.inference_batch >= 0, "runtime.inference_batch", self.inference_batch, ">= 0")
        require(
            self.inference_wait_ms >= 0, "runtime.inference_wait_ms", self.inference_wait_ms, ">= 0"
        )
        positive_int("runtime.inference_threads", self.inference_threads)
        require(
            1 <= self.inference_groups <= self.envs_per_actor,
            "runtime.inference_groups",
            self.inference_groups,
            f"between 1 and runtime.envs_per_actor = {self.envs_per_actor}",
        )
        if self.cuda_graph and self.compile:
            raise ConfigError(
                "runtime.cuda_graph=true and runtime.compile=true: choose one (the graph already "
                "replays the whole step as one launch)"
            )
        if self.deterministic:
            for key, bad in (("prefetch", True), ("inference", "central")):
                if getattr(self, key) == bad:
                    raise ConfigError(
                        f"runtime.{key}={bad} cannot be reproduced (it depends on timing); "
                        f"runtime.deterministic=true needs runtime.{key}="
                        f"{'false' if key == 'prefetch' else 'actor or auto'}"
                    )
        slots = self.slots_per_batch
        require(
            self.num_buffers == 0 or self.num_buffers >= slots,
            "runtime.num_buffers",
            self.num_buffers,
            f"0 (auto) or >= batch_size / envs_per_actor = {slots}",
        )

    @property
    def slots_per_batch(self) -> int:
        return self.batch_size // self.envs_per_actor

    @property
    def buffer_slots(self) -> int:
        """``num_buffers``, or by default: with prefetch, 2 per actor plus one batch (actors
        never wait); without, one per actor and at least one batch (a policy lag near one
        update: no slot sits full while the learner works)."""
        if self.num_buffers:
            return self.num_buffers
        if self.prefetch:
            return 2 * self.actors + self.slots_per_batch
        return max(self.actors, self.slots_per_batch)

    @property
    def actors(self) -> int:
        """Actor processes: ``num_actors``, or by default one per usable CPU (`usable_cpus`) on a
        small machine and all but ``RESERVED_CPUS`` on a larger one (the learner's and the
        inference server's)."""
        if self.num_actors:
            return self.num_actors
        cpus = usable_cpus()
        return cpus if cpus <= SMALL_MACHINE_CPUS else cpus - RESERVED_CPUS

    @property
    def learner_torch_threads(self) -> int:
        """``learner_threads``, or by default every usable CPU on a small machine (the actors
        mostly wait for the learner there) and the CPUs the actors leave on a larger one."""
        if self.learner_threads:
            return self.learner_threads
        cpus = usable_cpus()
        return cpus if cpus <= SMALL_MACHINE_CPUS else max(1, cpus - self.actors)

    def placement(self, device: torch.device) -> str:
        """Where the acting policy runs: ``actor`` or ``central`` (``auto`` resolved; always
        ``actor`` in a deterministic run)."""
        if self.inference != "auto":
            return self.inference
        return "central" if device.type == "cuda" and not self.deterministic else "actor"

    def resolved_precision(self, device: torch.device) -> str:
        """The network's precision on ``device``: ``precision``, or for ``auto`` bf16 on a CUDA
        GPU that has it and fp32 elsewhere. On a CPU with AVX-512 bf16 bf16 is opt-in: it ran the
        default learner 2.1x as fast, but its one 10M-frame Pong run ended below the fp32 run's
        (docs/learning.md, "Pong, bf16 on the CPU")."""
        if self.precision != "auto":
            return self.precision
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return "bf16"
        return "fp32"

    def precision_warning(self, device: torch.device) -> str | None:
        """Why this run's precision will be slow, or None: bf16 asked for on a CPU that would
        emulate it (``cpu_bf16_instructions`` is empty)."""
        if device.type != "cpu" or self.resolved_precision(device) != "bf16":
            return None
        if cpu_bf16_instructions():
            return None
        return (
            f"runtime.precision=bf16 on a CPU without native bf16 instructions ({cpu_name()}, "
            f"{cpu_isa()}; native needs {' or '.join(BF16_INSTRUCTIONS[1::-1])}): autocast "
            f"emulates bf16 here, which measured {EMULATED_BF16_COST}; runtime.precision=auto "
            f"or fp32 avoids it"
        )
