"""Evaluation: play whole games with a trained policy and report their true returns.

The protocol is the one IMPALA reports Atari scores with (Espeholt et al. 2018, arXiv
1802.01561; the DQN Nature protocol of Mnih et al. 2015): a game is a whole game (all lives,
``episodic_life=False``), it starts with a random number of no-ops (up to ``env.noop_max``) and
is cut at ``env.max_episode_frames`` (108,000 frames, 30 minutes). The score of a game is its
unclipped return; the policy samples from its softmax unless ``greedy``.

Counting games without bias: the E environments of the vector do not finish games at the same
pace, and taking "the first N games to end" would favour short games (often the bad ones). So
each environment gets a fixed quota (N / E games, the first N mod E environments one more) and
only its first ``quota`` games count; evaluation ends when every environment has played its
quota. Every counted game is then an independent draw, whatever its length. ``returns`` lists
them by environment index, then in the order each environment finished them.

This module is the protocol only: ``evaluate`` takes a model and env settings and returns the
games. Beside it, ``stampede.eval.video`` records one more game to mp4, ``stampede.eval.results``
writes what an evaluation leaves behind (eval.json, metrics) and ``stampede.eval.run`` evaluates
a run with its config: during and after training, and from a checkpoint (``python run.py
mode=eval checkpoint=<run dir or file>``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stampede.envs import make_vec_env
from stampede.eval.policy import EvalError, Policy
from stampede.eval.video import check_video_env, record_video
from stampede.models import ActorCritic

# Evaluation seeds come from the run seed through their own SeedSequence stream, so that they
# never coincide with the actors' training seeds (spawned on (actor_id, generation)).
_EVAL_STREAM = 0x6576616C  # "eval"


class EvalStopped(Exception):
    """A stop was requested (Ctrl-C, SIGTERM, a preemption) while the games were being played:
    the evaluation is abandoned unfinished, nothing of it is reported or written."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The games of one evaluation: true returns (by env index, then completion), lengths, stats.

    ``video`` is the mp4 of one more game, not counted, where one was recorded
    (``stampede.eval.video``).
    """

    returns: tuple[float, ...]
    lengths: tuple[int, ...]  # agent steps of each game
    video: Path | None = None

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def median(self) -> float:
        return float(np.median(self.returns))

    @property
    def std(self) -> float:
        """Population standard deviation (ddof=0) of the returns: 0.0 for one game."""
        return float(np.std(self.returns))

    @property
    def min(self) -> float:
        return float(np.min(self.returns))

    @property
    def max(self) -> float:
        return float(np.max(self.returns))

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))


def episode_quotas(episodes: int, num_envs: int) -> list[int]:
    """Games each environment must play: ``episodes`` split as evenly as possible.

    Never more environments than games: ``episode_quotas(3, 8) == [1, 1, 1]``.
    """
    if episodes < 1:
        raise EvalError(f"eval.episodes must be >= 1, got {episodes}")
    if num_envs < 1:
        raise EvalError(f"eval.num_envs must be >= 1, got {num_envs}")
    envs = min(episodes, num_envs)
    return [episodes // envs + (1 if i < episodes % envs else 0) for i in range(envs)]


def eval_seed(run_seed: int) -> int:
    """The evaluation seed of a run: derived from its seed, apart from the training seeds."""
    (seed,) = np.random.SeedSequence(run_seed, spawn_key=(_EVAL_STREAM,)).generate_state(1)
    return int(seed) % 2**31


# -------------------------------------------------------------------------------- evaluate


def evaluate(
    model: ActorCritic,
    env_kwargs: dict[str, Any],
    *,
    episodes: int,
    num_envs: int,
    seed: int,
    greedy: bool,
    reward_clip: float,
    device: torch.device | str,
    video_dir: Path | None = None,
    video_name: str = "eval",
    task: int = 0,
    should_stop: Callable[[], bool] | None = None,
    threads: int = 1,
) -> Evaluation:
    """Play ``episodes`` whole games on ``num_envs`` environments and return their true returns.

    env_kwargs: the fields of ``cfg.env`` (``dataclasses.asdict``); ``episodic_life`` is turned
    off, the rest (no-op starts, frame cap, sticky actions, action set) is kept as trained.
    seed: seeds the environments (env i gets ``seed + i``) and the action sampling; the global
    torch RNG is left as it was. reward_clip: the clip the model was trained with (its input).
    video_dir: if given, one more game is played on a single renderable environment and recorded
    to ``<video_dir>/<video_name>.mp4`` (``stampede.eval.video``; not counted in the returns).
    task: the task id of ``env_kwargs``' game for a multi-task network (its index in env.games).
    should_stop: asked before every step; once it says True, `EvalStopped` is raised (200 whole
    games can take as long as the training, e.g. where each game runs to the frame cap).
    threads: torch's intra-op threads and the C++ vector's env threads (at most one per env)
    while it plays; torch's setting is restored after. One where other processes (actors) are
    running; the usable CPUs where evaluation has the machine (README, "Evaluation").
    """
    quotas = episode_quotas(episodes, num_envs)
    device = torch.device(device)
    kwargs = {**env_kwargs, "episodic_life": False}
    was_training, torch_threads = model.training, torch.get_num_threads()
    model.eval()
    torch.set_num_threads(threads)
    rng_devices: list[int] = []  # the model's GPU generator is forked too: sampling runs there
    if device.type == "cuda":
        rng_devices = [device.index if device.index is not None else torch.cuda.current_device()]
    try:
        with torch.random.fork_rng(devices=rng_devices):
            torch.manual_seed(seed)
            if video_dir is not None:
                check_video_env(kwargs, seed)  # fail before the long part, not after it
            policy = Policy(model, len(quotas), device, greedy, reward_clip, task)
            returns, lengths = _play(policy, kwargs, quotas, seed, should_stop, threads)
            video = None
            if video_dir is not None:
                # The next env's seed (folded like env_seeds): a game not in the statistics.
                video_seed = (seed + len(quotas)) % 2**31
                policy = Policy(model, 1, device, greedy, reward_clip, task)
                video = record_video(policy, kwargs, video_seed, video_dir, video_name)
    finally:
        model.train(was_training)
        torch.set_num_threads(torch_threads)
    return Evaluation(tuple(returns), tuple(lengths), video)


def _play(
    policy: Policy,
    env_kwargs: dict[str, Any],
    quotas: Sequence[int],
    seed: int,
    should_stop: Callable[[], bool] | None,
    threads: int,
) -> tuple[list[float], list[int]]:
    """Step one vector with ``policy`` (fresh, for len(quotas) envs, on up to ``threads``
    threads) until environment i has finished ``quotas[i]`` games; collect them. `EvalStopped`
    once ``should_stop()``."""
    E = len(quotas)
    env = make_vec_env(num_envs=E, seed=seed, num_threads=min(threads, E), **env_kwargs)
    games: list[list[tuple[float, int]]] = [[] for _ in range(E)]
    try:
        obs = env.reset(seed=seed)
        while any(len(games[i]) < quotas[i] for i in range(E)):
            if should_stop is not None and should_stop():
                raise EvalStopped
            result = env.step(policy.act(obs))
            policy.observe(result.reward, result.done)
            obs = result.obs
            for i in map(int, np.flatnonzero(np.isfinite(result.episode_return))):
                if len(games[i]) < quotas[i]:  # later games of a fast env would bias the sample
                    games[i].append(
                        (float(result.episode_return[i]), int(result.episode_length[i]))
                    )
    finally:
        env.close()
    flat = [game for env_games in games for game in env_games]
    return [r for r, _ in flat], [n for _, n in flat]
