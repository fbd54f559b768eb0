"""The evaluation protocol (stampede.eval.protocol): exactly N whole games, no bias to short
games, reproducible from the seed, and the statistics of the games."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from stampede.envs import EnvSpec, VecStep
from stampede.eval import protocol as ev
from stampede.train.actor import ActorSetup

from .conftest import CARTPOLE_KWARGS, cartpole_mlp, run_eval

# ------------------------------------------------------------------------------ counting


@pytest.mark.parametrize(
    ("episodes", "num_envs", "expected"),
    [(10, 4, [3, 3, 2, 2]), (8, 8, [1] * 8), (3, 8, [1, 1, 1]), (1, 1, [1]), (5, 1, [5])],
)
def test_episode_quotas_split_evenly(episodes: int, num_envs: int, expected: list[int]) -> None:
    assert ev.episode_quotas(episodes, num_envs) == expected


@pytest.mark.parametrize(("episodes", "num_envs"), [(0, 4), (4, 0)])
def test_episode_quotas_reject_zero(episodes: int, num_envs: int) -> None:
    with pytest.raises(ev.EvalError, match="must be >= 1"):
        ev.episode_quotas(episodes, num_envs)


@pytest.mark.parametrize(("episodes", "num_envs", "use_lstm"), [(7, 3, False), (5, 8, True)])
def test_cartpole_gives_exactly_n_finite_returns(
    episodes: int, num_envs: int, use_lstm: bool
) -> None:
    result = run_eval(cartpole_mlp(use_lstm), CARTPOLE_KWARGS, episodes=episodes, num_envs=num_envs)
    assert result.episodes == episodes == len(result.lengths)
    assert np.isfinite(result.returns).all()
    # CartPole pays 1 per step, so a whole episode's return is its length.
    assert list(result.returns) == [float(n) for n in result.lengths]
    assert result.min <= result.median <= result.max
    assert result.mean == pytest.approx(np.mean(result.returns))


def test_same_seed_same_games_and_global_rng_untouched() -> None:
    model = cartpole_mlp()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = run_eval(model, CARTPOLE_KWARGS, episodes=6, num_envs=3)
    assert torch.equal(torch.get_rng_state(), before)
    assert run_eval(model, CARTPOLE_KWARGS, episodes=6, num_envs=3).returns == first.returns
    assert run_eval(model, CARTPOLE_KWARGS, episodes=6, num_envs=3, seed=4).returns != first.returns


def test_model_mode_is_restored() -> None:
    model = cartpole_mlp()
    model.train()
    run_eval(model, CARTPOLE_KWARGS, episodes=1, num_envs=1)
    assert model.training


class _PacedGames:
    """A fake vector: env i ends a game every (i + 1) * 3 steps; its kth game returns 100 i + k.

    ``made`` records the keyword arguments of every vector made (the env settings evaluated)."""

    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, num_envs: int, seed: int, **kwargs: Any) -> None:
        self.made.append({"num_envs": num_envs, "seed": seed, **kwargs})
        self.num_envs = num_envs
        self.spec = EnvSpec((4,), np.dtype(np.float32), 2, 1)
        self.t = 0
        self.games = np.zeros(num_envs, dtype=np.int64)

    def reset(self, seed: int) -> np.ndarray:
        return np.zeros((self.num_envs, 4), dtype=np.float32)

    def step(self, actions: np.ndarray) -> VecStep:
        self.t += 1
        ended = self.t % (3 * (np.arange(self.num_envs) + 1)) == 0
        ret = np.where(ended, 100.0 * np.arange(self.num_envs) + self.games, np.nan)
        self.games += ended
        zeros = np.zeros(self.num_envs, dtype=np.float32)
        return VecStep(self.reset(0), zeros, ended, ret.astype(np.float32), ended * 3)

    def close(self) -> None:
        pass


def test_fast_envs_do_not_crowd_out_slow_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Env 0's games are 3x shorter than env 2's; each still counts only its quota, in order."""
    monkeypatch.setattr(ev, "make_vec_env", _PacedGames)
    result = run_eval(cartpole_mlp(), CARTPOLE_KWARGS, episodes=7, num_envs=3)
    assert result.returns == (0.0, 1.0, 2.0, 100.0, 101.0, 200.0, 201.0)


def test_games_are_whole_games_on_at_most_one_env_per_game(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trained Atari agent loses lives; evaluation scores the whole game (episodic_life off),
    with everything else as trained, and never makes more envs than games."""
    monkeypatch.setattr(ev, "make_vec_env", _PacedGames)
    monkeypatch.setattr(_PacedGames, "made", [])
    trained = {**CARTPOLE_KWARGS, "episodic_life": True, "noop_max": 30}
    run_eval(cartpole_mlp(), trained, episodes=2, num_envs=8, seed=11)
    (made,) = _PacedGames.made
    assert made == {
        "num_envs": 2,
        "seed": 11,
        "num_threads": 1,
        "kind": "gym",
        "gym_id": "CartPole-v1",
        "episodic_life": False,
        "noop_max": 30,
    }
    assert trained["episodic_life"] is True  # the caller's settings are left as they were


# ---------------------------------------------------------------------------- statistics


def test_statistics_of_the_games() -> None:
    games = ev.Evaluation(returns=(1.0, 3.0, 8.0), lengths=(10, 20, 60))
    assert (games.episodes, games.mean, games.median) == (3, 4.0, 3.0)
    assert (games.min, games.max, games.mean_length) == (1.0, 8.0, 30.0)
    assert games.std == pytest.approx(np.sqrt(26 / 3))  # population std (ddof=0)
    one = ev.Evaluation(returns=(5.0,), lengths=(7,))
    assert (one.std, one.median, one.video) == (0.0, 5.0, None)


def test_the_eval_seed_is_fixed_by_the_run_seed_and_apart_from_the_training_seeds() -> None:
    seeds = [ev.eval_seed(run_seed) for run_seed in range(50)]
    assert seeds == [ev.eval_seed(run_seed) for run_seed in range(50)]  # reproducible
    assert len(set(seeds)) == 50  # one stream per run
    assert all(0 <= s < 2**31 for s in seeds)  # a valid gymnasium/ALE seed
    for run_seed, seed in enumerate(seeds):
        actors = [
            ActorSetup(i, 0, 0, run_seed, 8, 20, 1.0, {}, "cpu", 1).seeds()[0] for i in range(8)
        ]
        assert seed not in {s % 2**31 for s in actors}
