"""Several games in one vector: the environment side of a multi-task run (``env.games``).

IMPALA's multi-task agents (Espeholt et al. 2018, arXiv 1802.01561, section 5.3; Hessel et al.
2019, arXiv 1809.04474) learn many games with one set of parameters. Here each env slot of the
run plays one game for the whole run (``stampede.envs.settings.env_tasks``), and an actor whose
envs span several games steps one single-game vector per game: ``TaskVecEnv`` concatenates them
so that the actor sees one ``VecEnv`` and knows the task id of each env.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stampede.envs.spec import EnvError, VecEnv, VecStep, check_actions


class TaskVecEnv:
    """Single-game vectors side by side: env i of the whole is env i - offset of its part.

    ``tasks`` [E]: the task id (index into ``env.games``) of each env, constant for the run.
    Env i is seeded ``seed + i`` as in any vector (each part is reset with its offset).
    """

    def __init__(self, parts: Sequence[VecEnv], tasks: Sequence[int]) -> None:
        if not parts:
            raise EnvError("TaskVecEnv needs at least one vector")
        specs = {(p.spec.obs_shape, p.spec.num_actions, p.spec.frames_per_step) for p in parts}
        if len(specs) > 1:
            raise EnvError(
                f"the games of env.games give different observations or action sets {specs}; "
                "they must share one (env.full_action_space=true, the same screen settings)"
            )
        self.parts = list(parts)
        self.num_envs = sum(p.num_envs for p in parts)
        if len(tasks) != self.num_envs:
            raise EnvError(f"tasks must give one task per env ({self.num_envs}), got {len(tasks)}")
        self.spec = parts[0].spec
        self.tasks = np.asarray(tasks, dtype=np.int64)
        self._splits = np.cumsum([p.num_envs for p in parts])[:-1]  # where each part starts

    def reset(self, seed: int) -> np.ndarray:
        offsets = [0, *self._splits]
        return np.concatenate(
            [p.reset(seed + int(o)) for p, o in zip(self.parts, offsets, strict=True)]
        )

    def step(self, actions: np.ndarray) -> VecStep:
        actions = check_actions(actions, self.num_envs, self.spec.num_actions)
        split = np.split(actions, self._splits)  # [E] -> one [E_part] per part
        results = [part.step(a) for part, a in zip(self.parts, split, strict=True)]
        return VecStep(*(np.concatenate(field) for field in zip(*results, strict=True)))

    def close(self) -> None:
        for part in self.parts:
            part.close()
