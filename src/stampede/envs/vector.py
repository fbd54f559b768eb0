"""Vectors of environments stepped as one batch inside the calling (actor) process.

Three implementations of the ``VecEnv`` contract in ``stampede.envs.spec``:

- ``AtariVecEnv`` (backend ``"python_loop"``): a Python loop over ``AtariGame`` emulators
  writing into preallocated uint8 arrays, with the resize and the frame stacks batched over the
  vector.
- ``AleVectorEnv`` (backend ``"ale_vector"``): ale-py's C++ ``AtariVectorEnv`` (threads, OpenCV
  resize), configured and wrapped so that it returns exactly what ``AtariVecEnv`` returns.
- ``GymVecEnv`` (kind ``"gym"``, backend ``"python_loop"``): a Python loop over gymnasium envs
  of any id with a discrete action space, unprocessed.

No subprocesses: the actor processes are the parallelism.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from stampede.envs.atari import AtariGame, action_set, new_ale
from stampede.envs.preprocessing import AreaResize, push_frame, restart_stack
from stampede.envs.spec import (
    EnvError,
    EnvSpec,
    GameTracker,
    VecStep,
    check_actions,
    env_seeds,
)

if TYPE_CHECKING:
    import gymnasium

    from stampede.envs.settings import EnvSettings


def atari_spec(settings: EnvSettings, actions: list[Any] | None = None) -> EnvSpec:
    """Spec of an Atari vector: obs uint8 [frame_stack, screen_size, screen_size].

    ``actions``: the game's ALE action set if known; otherwise a throwaway emulator reads it.
    """
    if actions is None:
        actions = action_set(new_ale(settings, seed=0), settings.full_action_space)
    size = settings.screen_size
    return EnvSpec(
        obs_shape=(settings.frame_stack, size, size),
        obs_dtype=np.dtype(np.uint8),
        num_actions=len(actions),
        frames_per_step=settings.frame_skip,
        action_meanings=tuple(a.name for a in actions),
    )


def _check_num_envs(num_envs: int) -> None:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise EnvError(f"num_envs must be an int >= 1, got {num_envs!r}")


class _Vector:
    """Shared bookkeeping: reset-before-step check, true game returns."""

    num_envs: int
    spec: EnvSpec

    def __init__(self, num_envs: int) -> None:
        self._tracker = GameTracker(num_envs)
        self._started = False

    def _check_step(self, actions: np.ndarray) -> np.ndarray:
        if not self._started:
            raise EnvError(f"{type(self).__name__}.step() called before reset(seed)")
        return check_actions(actions, self.num_envs, self.spec.num_actions)

    def _finish(
        self, obs: np.ndarray, reward: np.ndarray, done: np.ndarray, game_end: np.ndarray
    ) -> VecStep:
        episode_return, episode_length = self._tracker.update(reward, game_end)
        return VecStep(obs, reward.astype(np.float32), done, episode_return, episode_length)


class AtariVecEnv(_Vector):
    """E Atari games in one process: obs uint8 [E, frame_stack, screen_size, screen_size]."""

    backend = "python_loop"

    def __init__(self, num_envs: int, settings: EnvSettings, seed: int = 0) -> None:
        _check_num_envs(num_envs)
        super().__init__(num_envs)
        self.num_envs, self.settings = num_envs, settings
        self.games = [AtariGame(settings, int(s)) for s in env_seeds(seed, num_envs)]
        screen_hw = self.games[0].screen_hw
        size = settings.screen_size
        self.spec = atari_spec(settings, self.games[0].actions)
        self._raw = np.zeros(screen_hw, dtype=np.uint8)  # [210, 160], the current game's frame
        self._stack = np.zeros((num_envs, *self.spec.obs_shape), dtype=np.uint8)  # [E, K, h, w]
        self._resize = AreaResize(screen_hw, (size, size))

    def reset(self, seed: int) -> np.ndarray:
        for i, game_seed in enumerate(env_seeds(seed, self.num_envs)):
            self.games[i].reset(self._raw, seed=int(game_seed))
            restart_stack(self._stack[i], self._resize(self._raw))
        self._tracker.reset()
        self._started = True
        return self._stack.copy()

    def step(self, actions: np.ndarray) -> VecStep:
        actions = self._check_step(actions)
        reward = np.zeros(self.num_envs, dtype=np.float32)
        done = np.zeros(self.num_envs, dtype=bool)
        game_end = np.zeros(self.num_envs, dtype=bool)
        episodic_life = self.settings.episodic_life
        # One game at a time, resize included: a frame stays in cache from emulator to stack.
        for i, game in enumerate(self.games):
            outcome = game.step(int(actions[i]), self._raw)
            reward[i] = outcome.reward
            game_end[i] = outcome.game_over or outcome.truncated
            done[i] = game_end[i] or (episodic_life and outcome.life_lost)
            if game_end[i]:
                game.reset(self._raw)  # same-step auto-reset: obs is the next game's first
                restart_stack(self._stack[i], self._resize(self._raw))
            else:
                push_frame(self._stack[i], self._resize(self._raw))
        return self._finish(self._stack.copy(), reward, done, game_end)

    def close(self) -> None:
        self.games.clear()
        self._started = False


class AleVectorEnv(_Vector):
    """ale-py's C++ ``AtariVectorEnv`` giving the same observations as ``AtariVecEnv``.

    How its options are set, and why (checked against ale-py 0.12):

    - ``noop_max + 1``: its no-op count is uniform in [0, noop_max - 1]; ours in [0, noop_max].
    - ``episodic_life=False``: its episodic life *resets the game* at a life loss, so the true
      game return would never be seen. We read life losses from ``info["lives"]`` instead.
    - ``reward_clipping=False`` (the learner clips), ``use_fire_reset=False`` (not in the
      protocol), ``autoreset_mode="SameStep"`` (the contract), ``maxpool=True``.
    - ``max_num_frames_per_episode`` is its frame cap: frames after the no-ops, as ours.
    - ``num_threads``: 1 by default, since an actor process is meant to use one core.
    """

    backend = "ale_vector"

    def __init__(self, num_envs: int, settings: EnvSettings, num_threads: int = 1) -> None:
        from ale_py.vector_env import AtariVectorEnv

        _check_num_envs(num_envs)
        super().__init__(num_envs)
        self.num_envs, self.settings = num_envs, settings
        size = settings.screen_size
        self._env = AtariVectorEnv(
            settings.game,
            num_envs,
            num_threads=num_threads,
            max_num_frames_per_episode=settings.max_episode_frames,
            repeat_action_probability=settings.repeat_action_probability,
            full_action_space=settings.full_action_space,
            autoreset_mode="SameStep",
            img_height=size,
            img_width=size,
            grayscale=True,
            stack_num=settings.frame_stack,
            frameskip=settings.frame_skip,
            maxpool=True,
            noop_max=settings.noop_max + 1,
            episodic_life=False,
            life_loss_info=False,
            reward_clipping=False,
            use_fire_reset=False,
        )
        self.spec = atari_spec(settings, list(self._env.ale.get_action_set()))
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._env_id = np.arange(num_envs)  # env id of each row of the last result

    def reset(self, seed: int) -> np.ndarray:
        obs, info = self._env.reset(seed=env_seeds(seed, self.num_envs))
        self._env_id = info["env_id"]
        self._lives = self._in_env_order(info, info["lives"]).astype(np.int64)
        self._tracker.reset()
        self._started = True
        return self._in_env_order(info, obs)

    def step(self, actions: np.ndarray) -> VecStep:
        actions = self._check_step(actions)
        # The C++ side gives action row i to the env of result row i of the last step.
        obs, reward, terminated, truncated, info = self._env.step(actions[self._env_id])
        self._env_id = info["env_id"]
        obs, reward, terminated, truncated, lives = (
            self._in_env_order(info, x) for x in (obs, reward, terminated, truncated, info["lives"])
        )
        game_end = terminated | truncated  # exactly where the C++ side reset the game
        life_lost = ~game_end & (lives < self._lives) & (lives > 0)
        self._lives = lives.astype(np.int64)
        done = game_end | (life_lost if self.settings.episodic_life else False)
        return self._finish(obs, reward, done, game_end)

    def _in_env_order(self, info: dict[str, Any], x: np.ndarray) -> np.ndarray:
        """Rows of ``x`` sorted by env id (results of a synchronous batch may come unordered)."""
        env_id = info["env_id"]
        if np.array_equal(env_id, np.arange(self.num_envs)):
            return x
        return x[np.argsort(env_id)]

    def close(self) -> None:
        self._env.close()
        self._started = False


class GymVecEnv(_Vector):
    """E gymnasium environments (any id with a Discrete action space), observations as they are.

    Observations are float32, except uint8 image spaces which stay uint8. There are no lives:
    every termination or truncation ends a game and reports its return.
    """

    backend = "python_loop"

    def __init__(self, num_envs: int, gym_id: str) -> None:
        _check_num_envs(num_envs)
        super().__init__(num_envs)
        self.num_envs = num_envs
        self.envs = [make_gym(gym_id) for _ in range(num_envs)]
        self.spec = gym_spec(self.envs[0], gym_id)
        self._action_start = int(self.envs[0].action_space.start)  # type: ignore[attr-defined]
        self._obs = np.zeros((num_envs, *self.spec.obs_shape), dtype=self.spec.obs_dtype)

    def reset(self, seed: int) -> np.ndarray:
        for i, env_seed in enumerate(env_seeds(seed, self.num_envs)):
            self._obs[i], _ = self.envs[i].reset(seed=int(env_seed))
        self._tracker.reset()
        self._started = True
        return self._obs.copy()

    def step(self, actions: np.ndarray) -> VecStep:
        actions = self._check_step(actions)
        reward = np.zeros(self.num_envs, dtype=np.float32)
        done = np.zeros(self.num_envs, dtype=bool)
        for i, env in enumerate(self.envs):
            action = self._action_start + int(actions[i])
            obs, reward[i], terminated, truncated, _ = env.step(action)
            done[i] = terminated or truncated
            if done[i]:
                obs, _ = env.reset()  # unseeded: the env's RNG continues from reset(seed)
            self._obs[i] = obs
        return self._finish(self._obs.copy(), reward, done, done)

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs.clear()
        self._started = False


def make_gym(gym_id: str) -> gymnasium.Env:
    """``gymnasium.make(gym_id)``, or EnvError naming ``env.gym_id``."""
    import gymnasium

    try:
        return gymnasium.make(gym_id)
    except gymnasium.error.Error as error:
        raise EnvError(
            f"env.gym_id={gym_id!r} is not a gymnasium id that can be made ({error}); "
            "for Atari use env.kind=atari with env.game"
        ) from error


def gym_spec(env: gymnasium.Env, gym_id: str) -> EnvSpec:
    """Spec of a gymnasium env; EnvError unless its spaces are a Box and a Discrete."""
    from gymnasium import spaces

    if not isinstance(env.action_space, spaces.Discrete):
        raise EnvError(
            f"env.gym_id={gym_id!r} has action space {env.action_space}; "
            "IMPALA's softmax policy needs a Discrete action space"
        )
    if not isinstance(env.observation_space, spaces.Box):
        raise EnvError(
            f"env.gym_id={gym_id!r} has observation space {env.observation_space}; "
            "a Box (array) observation space is needed"
        )
    box = env.observation_space
    dtype = np.dtype(np.uint8) if box.dtype == np.uint8 else np.dtype(np.float32)
    return EnvSpec(
        obs_shape=tuple(box.shape),
        obs_dtype=dtype,
        num_actions=int(env.action_space.n),
        frames_per_step=1,
    )
