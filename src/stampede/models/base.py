"""The actor-critic skeleton shared by every Stampede network.

IMPALA (Espeholt et al. 2018, arXiv 1802.01561, Fig. 3) feeds the torso's features, the
clipped last reward and a one-hot of the last action into an optional LSTM, then into a
policy head (logits over actions) and a baseline head (V(x)). Subclasses supply only the
torso; everything after it lives here, so the shallow, deep and MLP networks share one
core and one set of heads.

Multi-task networks (``num_tasks > 1``, one agent for several games) have one baseline output
per task, as in PopArt-IMPALA (Hessel et al. 2019, arXiv 1809.04474): each game's values live on
their own scale, and ``forward`` returns the value of each step's own task.

Time-major throughout: every input and output is [T, B, ...].
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CoreState = tuple[Tensor, ...]


class ModelOutput(NamedTuple):
    """What one forward pass returns.

    policy_logits: [T, B, A] unnormalised log-probabilities.
    baseline:      [T, B] value estimates V(x_t) (of each step's task in multi-task networks).
    core_state:    () without LSTM, else (h, c), each [1, B, lstm_size], the state after
                   the last step (feed it back in for the next unroll).
    """

    policy_logits: Tensor
    baseline: Tensor
    core_state: CoreState


def as_shape(obs_shape: Sequence[int]) -> tuple[int, ...]:
    """Turn a shape from Hydra (possibly a ListConfig of ints) into a plain tuple of ints."""
    return tuple(int(d) for d in obs_shape)


def check_positive(model: str, **sizes: int) -> None:
    """Raise our ValueError if any named size is < 1 (e.g. num_actions=0 from a bad env spec)."""
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"model {model}: {name} must be >= 1, got {value}")


class ActorCritic(nn.Module):
    """Torso -> concat(features, last reward, one-hot last action) -> [LSTM] -> heads.

    Subclasses build a torso mapping [N, *obs_shape] float observations to [N, torso_size]
    features and pass it to this constructor. uint8 observations (Atari frames) are
    scaled by 1/255 here, before the torso; any other dtype is cast to float32 unchanged.

    The reward is concatenated as given: the caller clips it (the paper clips to [-1, 1]).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        torso: nn.Module,
        torso_size: int,
        use_lstm: bool = False,
        lstm_size: int = 256,
        num_tasks: int = 1,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        check_positive(name, num_actions=num_actions, lstm_size=lstm_size, num_tasks=num_tasks)
        self.obs_shape = as_shape(obs_shape)
        self.num_actions = int(num_actions)
        self.num_tasks = int(num_tasks)
        self.use_lstm = bool(use_lstm)
        self.lstm_size = int(lstm_size)
        self.torso = torso
        # +1 for the last reward, +num_actions for the one-hot last action.
        core_in = torso_size + 1 + self.num_actions
        self.core: nn.LSTM | None = nn.LSTM(core_in, self.lstm_size) if self.use_lstm else None
        core_out = self.lstm_size if self.use_lstm else core_in
        self.policy = nn.Linear(core_out, self.num_actions)
        self.baseline = nn.Linear(core_out, self.num_tasks)  # one value per task
        self._init_weights()

    def _init_weights(self) -> None:
        """Orthogonal weights (Saxe et al. 2014) with zero biases.

        The torso's layers get the ReLU gain sqrt(2), so features keep their scale layer after
        layer. PyTorch's default init shrinks each layer's output: on Pong frames the shallow
        network's 256 features came out with std 0.016, so both heads saw nearly constant
        inputs and learning stalled for millions of frames (docs/learning.md). A small policy
        init (gain 0.01) keeps the first policy close to uniform, so early entropy is high and
        the first V-trace importance weights are well behaved; the baseline head has gain 1.
        """
        for module in self.torso.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.orthogonal_(module.weight, gain=nn.init.calculate_gain("relu"))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.orthogonal_(self.baseline.weight, gain=1.0)
        nn.init.zeros_(self.baseline.bias)
        self._init_policy_head()

    def _init_policy_head(self) -> None:
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> CoreState:
        """Zero LSTM state (h, c), each [1, B, lstm_size]; () without LSTM."""
        if self.core is None:
            return ()
        shape = (1, batch_size, self.lstm_size)
        return (torch.zeros(shape, device=device), torch.zeros(shape, device=device))

    def forward(
        self,
        obs: Tensor,
        last_action: Tensor,
        reward: Tensor,
        done: Tensor,
        core_state: CoreState = (),
        task: Tensor | None = None,
    ) -> ModelOutput:
        """Run T steps for B environments.

        obs [T, B, *obs_shape] (uint8 scaled by 1/255, or float), last_action [T, B] int,
        reward [T, B] float (already clipped), done [T, B] bool where done[t] means obs[t]
        starts a new episode, so the LSTM state is zeroed before step t. core_state is the
        state before step 0 (() means zeros). task [T, B] int: the task of each step, which
        picks its baseline output (needed when ``num_tasks > 1``; ignored otherwise).
        """
        T, B = self._check_inputs(obs, last_action, reward, done, core_state)
        self._check_task(task, T, B)
        core_in = self._core_input(obs, last_action, reward)  # [T*B, F]
        new_state: CoreState = ()
        if self.core is None:
            core_out = core_in
        else:
            state = core_state or self.initial_state(B, device=obs.device)
            # [T*B, F] -> [T, B, F] for the LSTM, and back after it.
            lstm_out, new_state = self._unroll(core_in.view(T, B, -1), done, state)
            core_out = lstm_out.reshape(T * B, self.lstm_size)
        logits = self.policy(core_out).view(T, B, self.num_actions)  # [T*B, A] -> [T, B, A]
        values = self.baseline(core_out)  # [T*B, num_tasks]
        if task is not None and self.num_tasks > 1:  # [T*B, K] -> [T*B, 1]: each step's task
            values = values.gather(1, task.reshape(T * B, 1).to(values.device).long())
        baseline = values.view(T, B)  # [T*B, 1] -> [T, B]
        return ModelOutput(logits, baseline, new_state)

    def _check_task(self, task: Tensor | None, steps: int, batch: int) -> None:
        name = type(self).__name__
        if task is None:
            if self.num_tasks > 1:
                raise ValueError(
                    f"model {name} has {self.num_tasks} baseline outputs (num_tasks="
                    f"{self.num_tasks}): pass task [T, B], the task id of each step"
                )
            return
        if tuple(task.shape) != (steps, batch) or task.is_floating_point():
            raise ValueError(
                f"model {name}: task must be an integer tensor of shape [T, B] = "
                f"{(steps, batch)}, "
                f"got {task.dtype} {tuple(task.shape)}"
            )

    def _core_input(self, obs: Tensor, last_action: Tensor, reward: Tensor) -> Tensor:
        """concat(torso(obs), r_tm1, one_hot(a_tm1)) as [T*B, torso_size + 1 + A]."""
        T, B = obs.shape[:2]
        x = obs.reshape(T * B, *self.obs_shape)  # [T, B, *obs] -> [T*B, *obs]
        if x.dim() == 4:  # images: channels-last lets oneDNN (CPU) and cuDNN pick faster kernels;
            x = x.contiguous(memory_format=torch.channels_last)  # uint8: a quarter of the bytes
        # uint8 straight to autocast's dtype (bf16 holds 0..255 exactly); the layout is kept
        x = x.to(_compute_dtype(x.device)).div_(255.0) if x.dtype == torch.uint8 else x.float()
        features = self.torso(x)  # [T*B, torso_size]
        one_hot = F.one_hot(last_action.reshape(T * B).long(), self.num_actions)  # [T*B, A]
        r_tm1 = reward.reshape(T * B, 1).to(features.dtype)  # [T, B] -> [T*B, 1]
        return torch.cat([features, r_tm1, one_hot.to(features.dtype)], dim=-1)

    def _unroll(self, core_in: Tensor, done: Tensor, state: CoreState) -> tuple[Tensor, CoreState]:
        """LSTM over [T, B, F], zeroing each env's state before any step t with done[t].

        Runs one LSTM call per stretch between resets rather than one per step: the result is
        the same (state is only touched at resets) and the long stretches use the fused kernel.
        """
        assert self.core is not None
        T = core_in.shape[0]
        starts = [0]
        if T > 1:  # one host sync to find where any env resets; skipped for T=1 inference
            starts += (done[1:].any(dim=1).nonzero().flatten() + 1).tolist()
        ends = [*starts[1:], T]
        outputs = []
        for start, end in zip(starts, ends, strict=True):
            keep = (~done[start]).to(core_in.dtype).view(1, -1, 1)  # [B] -> [1, B, 1]
            h, c = (s * keep for s in state)
            out, (h, c) = self.core(core_in[start:end], (h, c))
            state = (h, c)
            outputs.append(out)
        return torch.cat(outputs, dim=0), state

    def _check_inputs(
        self,
        obs: Tensor,
        last_action: Tensor,
        reward: Tensor,
        done: Tensor,
        core_state: CoreState,
    ) -> tuple[int, int]:
        """Return (T, B), raising our ValueError on any shape that does not fit the model."""
        name = type(self).__name__
        if obs.dim() != 2 + len(self.obs_shape) or tuple(obs.shape[2:]) != self.obs_shape:
            raise ValueError(
                f"model {name}: obs must have shape [T, B, *{self.obs_shape}], "
                f"got {tuple(obs.shape)}"
            )
        T, B = obs.shape[:2]
        if T == 0 or B == 0:
            raise ValueError(f"model {name}: obs needs T >= 1 and B >= 1, got {tuple(obs.shape)}")
        for arg, t in (("last_action", last_action), ("reward", reward), ("done", done)):
            if tuple(t.shape) != (T, B):
                raise ValueError(
                    f"model {name}: {arg} must have shape [T, B] = {(T, B)} like obs, "
                    f"got {tuple(t.shape)}"
                )
        if done.dtype != torch.bool:
            raise ValueError(f"model {name}: done must be a bool tensor, got {done.dtype}")
        if last_action.is_floating_point() or last_action.is_complex():
            raise ValueError(
                f"model {name}: last_action must be an integer tensor, got {last_action.dtype}"
            )
        self._check_core_state(core_state, B)
        return T, B

    def _check_core_state(self, core_state: CoreState, batch_size: int) -> None:
        name = type(self).__name__
        if not core_state:
            return
        if self.core is None:
            raise ValueError(
                f"model {name} has no LSTM (use_lstm=False) and takes core_state=(), "
                f"got {len(core_state)} tensors"
            )
        expected = (1, batch_size, self.lstm_size)
        shapes = [tuple(s.shape) for s in core_state]
        if len(core_state) != 2 or any(shape != expected for shape in shapes):
            raise ValueError(
                f"model {name}: core_state must be (h, c), each of shape {expected}, got {shapes}"
            )


def select_action(policy_logits: Tensor, greedy: bool = False) -> Tensor:
    """Actions [T, B] int64 from logits [T, B, A]: a sample from softmax, or the argmax."""
    if policy_logits.dim() != 3:
        raise ValueError(
            f"select_action: policy_logits must have shape [T, B, A], "
            f"got {tuple(policy_logits.shape)}"
        )
    T, B, A = policy_logits.shape
    if greedy:
        return policy_logits.argmax(dim=-1)
    probs = F.softmax(policy_logits.reshape(T * B, A).float(), dim=-1)  # [T, B, A] -> [T*B, A]
    return torch.multinomial(probs, num_samples=1).view(T, B)  # [T*B, 1] -> [T, B]


def _compute_dtype(device: torch.device) -> torch.dtype:
    """The dtype the first layer computes in: autocast's where it is on (``runtime.precision``
    bf16), else float32."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


def precision_context(
    precision: str, device: torch.device, cache: bool = True
) -> AbstractContextManager[Any]:
    """The context a network's forward runs in at ``runtime.precision``: bf16 autocast on
    ``device``'s type, or none for fp32 (the learner's and the inference server's forward).
    ``cache=False``: autocast keeps no casts of the weights between calls, as a CUDA graph's
    capture needs (the weights' bf16 copies are then part of the recorded step)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return nullcontext()
