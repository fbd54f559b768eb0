"""The learner's minibatch step as one CUDA graph (``runtime.cuda_graph``).

On a GPU the learner is launch-bound: each of its 16 minibatch steps per batch is a few hundred
small kernels (the forward, the losses, the backward, the clip, Adam over each parameter), and
the CPU that launches them is slower than the GPU that runs them. A CUDA graph records one step
once and replays it as a single launch (the recipe LeanRL applies to CleanRL's PPO, and PyTorch's
"whole network capture"). What that takes, and what `GraphedStep` does:

- **Fixed buffers.** The graph reads its inputs from the addresses it was recorded with: each
  minibatch (``runtime.batch_size / optim.minibatches`` trajectories, ``T + 1`` steps) and its
  share of the batch's arrival (policy, V-trace returns, advantage moments) are copied into
  static tensors (`load`) before each replay; the step's stats come out in a static tensor.
- **Nothing read to the host.** The learning rate is a device tensor that the optimizer reads
  (``Adam(capturable=True)``, filled before each update), the clip is
  ``clip_grad_norm_``'s on-device scaling, and a non-finite step is undone inside the graph
  (`stampede.train.guard.Undo`, ``torch.where`` against the state saved before the step; the
  update's flag ``ok`` stays false from that step on, as in the eager learner).
- **Warm-up, then capture.** The optimizer's state must exist and the CUDA libraries must have
  set up their workspaces before a capture, so the first `WARMUP_STEPS` steps run the same body
  eagerly on a side stream (they are real steps of training), and the next is recorded.

Without CUDA the same body runs eagerly (`run` without `capture`): the tests check on the CPU
that it is the eager learner's step. The configs a graph cannot hold (an LSTM's state, PopArt's
statistics moved on the host, several tasks, several ranks, torch.compile, TF-style RMSProp) are
refused by the config (`stampede.config.schema.Config`) before anything starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from stampede.train.guard import GUARDED, Undo
from stampede.train.minibatch import Arrival

WARMUP_STEPS = 3  # eager steps on a side stream before the capture


def _tensors(arrival: Arrival) -> list[Tensor]:
    """Every tensor of an arrival, in a fixed order: its policy, each V-trace return, moments."""
    return [arrival.pi_logits_t, *arrival.returns, arrival.advantage_moments]


def _static(arrival: Arrival) -> Arrival:
    """Fresh tensors holding ``arrival``'s values, to be the graph's inputs."""
    return Arrival(
        arrival.pi_logits_t.clone(),
        type(arrival.returns)(*(t.clone() for t in arrival.returns)),
        arrival.advantage_moments.clone(),
    )


class GraphedStep:
    """One optimizer step on a minibatch, with its inputs in fixed buffers and nothing read to
    the host; on CUDA recorded once as a graph and replayed after `WARMUP_STEPS` eager steps.

    ``losses(batch, arrival) -> (loss, stats)``: the learner's loss of a minibatch and its stats
    [len(METRIC_KEYS)]; ``params`` and ``optimizer``: what the step moves, the optimizer's lr a
    device tensor on CUDA; ``max_norm``: the clip (inf: none).
    """

    def __init__(
        self,
        losses: Callable[[dict[str, Tensor], Arrival], tuple[Tensor, Tensor]],
        params: Sequence[Tensor],
        optimizer: torch.optim.Optimizer,
        max_norm: float,
    ) -> None:
        self.losses = losses
        self.params = params
        self.optimizer = optimizer
        self.max_norm = max_norm
        device = params[0].device
        self.capture = device.type == "cuda"
        self.ok = torch.ones((), dtype=torch.bool, device=device)  # this update's steps so far
        self.batch: dict[str, Tensor] | None = None  # the static inputs, made by the first load
        self.arrival: Arrival | None = None
        self.stats: Tensor | None = None  # the static output of the recorded step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0

    def load(self, batch: dict[str, Tensor], arrival: Arrival) -> None:
        """Copy a minibatch and its arrival into the static inputs (the first: make them)."""
        if self.batch is None or self.arrival is None:
            self.batch = {k: t.clone() for k, t in batch.items()}
            self.arrival = _static(arrival)
            return
        for name, t in batch.items():
            self.batch[name].copy_(t)
        for static, t in zip(_tensors(self.arrival), _tensors(arrival), strict=True):
            static.copy_(t)

    def body(self) -> Tensor:
        """The step on the static inputs: loss, backward, clip, optimizer step, and its undo
        unless it and every step before it in the update were finite. Its stats
        [len(STEP_KEYS)]: the loss's, then the gradient norm before clipping."""
        assert self.batch is not None, "load a minibatch first"
        assert self.arrival is not None
        loss, stats = self.losses(self.batch, self.arrival)
        self.optimizer.zero_grad(set_to_none=True)  # the backward writes the gradients afresh
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm, foreach=True)
        stats = torch.cat([stats, grad_norm.reshape(1).to(stats.dtype)])
        finite = torch.isfinite(stats[: len(GUARDED)]).all() & torch.isfinite(grad_norm)
        self.ok.logical_and_(finite)
        undo = Undo(self.optimizer, self.ok.device)
        self.optimizer.step()
        undo.unless(self.ok)
        return stats

    def run(self) -> Tensor:
        """One step on what was loaded: eagerly (warm-up, or without CUDA), recorded at the
        step after the warm-up, replayed from then on. Its stats, a tensor of its own."""
        self.steps += 1
        if not self.capture:
            return self.body()
        if self.steps == 1:
            self._state_on_device()
        if self.graph is None and self.steps <= WARMUP_STEPS:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                stats = self.body()
            torch.cuda.current_stream().wait_stream(side)
            return stats
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            self.optimizer.zero_grad(set_to_none=True)  # the graph's pool holds the gradients
            with torch.cuda.graph(self.graph):
                self.stats = self.body()
        assert self.stats is not None
        self.graph.replay()
        return self.stats.clone()

    def _state_on_device(self) -> None:
        """A capturable optimizer counts its steps on the device; a checkpoint of an eager run
        (or torch's load) may have left them on the host."""
        device = self.params[0].device
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, Tensor) and value.device != device:
                    state[key] = value.to(device)

    def start_update(self) -> None:
        """A new update: every step so far finite (the flag the steps of the update share)."""
        self.ok.fill_(True)
