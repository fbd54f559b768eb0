"""Experiments compose, take their games from stampede.envs.games, and sweep as documented.

The sweep expansion is Hydra's own (experiments/sweep_jobs.py): the experiment's
``hydra.sweeper.params`` resolved as the basic sweeper gets them (instantiating it resolves
interpolations), then its ``split_arguments``, which lists the jobs without launching any.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from stampede.config.compose import load_config
from stampede.config.models import ResNetConfig
from stampede.envs import atari_games
from stampede.envs.games import ATARI5, CLASSIC5, DEV5, atari57

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sweep_jobs", ROOT / "experiments/sweep_jobs.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_jobs(experiment: str, *command_line: str) -> list[dict[str, str]]:
    """The swept overrides of every job `run.py --multirun +experiment=<experiment> ...` launches
    (experiments/sweep_jobs.py, the dry run users have)."""
    jobs = _load_script().sweep_jobs([f"+experiment={experiment}", *command_line])
    return [dict(o.split("=", 1) for o in job if not o.startswith("+experiment=")) for job in jobs]


def test_the_four_experiments_exist() -> None:
    assert set(EXPERIMENTS) >= {"atari57", "atari57_sticky", "atari5", "classic5", "pong_quick"}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_is_global_and_never_says_where_to_run(experiment: str) -> None:
    text = (CONF / "experiment" / f"{experiment}.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    node = yaml.safe_load(text)
    defaults = [str(entry) for entry in node.get("defaults", [])]
    assert not any("infra" in entry or "launcher" in entry for entry in defaults)
    assert "infra" not in node
    assert "launcher" not in node.get("hydra", {})


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_with_eval_at_end_and_wandb_tags(experiment: str) -> None:
    cfg = load_config(CONF, [f"+experiment={experiment}", "seed=2"])
    assert cfg.name == experiment
    assert cfg.eval.at_end == (experiment != "dev5")  # the dev set's probes compare training
    if experiment in ("atari5", "dev5"):  # one group per sweep: its timestamp follows the name
        stamp = r"_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d"
        assert re.fullmatch(experiment + stamp, cfg.logger.wandb.group or "")
    else:
        assert cfg.logger.wandb.group == experiment
    game = "multitask" if cfg.env.games else cfg.env.game
    assert cfg.logger.wandb.tags == [experiment, game, "seed_2"]


@pytest.mark.parametrize(
    ("experiment", "games"), [("multitask_classic5", 5), ("multitask_atari57", 57)]
)
def test_multitask_experiments_train_one_agent_on_their_games(experiment: str, games: int) -> None:
    cfg = load_config(CONF, [f"+experiment={experiment}"])
    assert tuple(cfg.env.games) == (CLASSIC5 if games == 5 else atari57())
    assert cfg.env.full_action_space
    assert cfg.vtrace.popart
    assert cfg.total_frames == games * 200_000_000  # 200M frames per game, as the paper
    if games == 57:  # the paper's deep network; enough env slots for 57 games on 2 actors
        assert isinstance(cfg.model, ResNetConfig)
        assert 2 * cfg.runtime.envs_per_actor >= 57


def test_atari57_is_the_papers_protocol() -> None:
    cfg = load_config(CONF, ["+experiment=atari57", "env.game=breakout"])
    assert isinstance(cfg.model, ResNetConfig)
    assert cfg.total_frames == 200_000_000
    e = cfg.env
    assert (e.kind, e.game, e.noop_max, e.frame_skip, e.episodic_life) == (
        "atari",
        "breakout",
        30,
        4,
        True,
    )
    assert (e.max_episode_frames, e.repeat_action_probability, e.full_action_space) == (
        108_000,
        0.0,
        False,
    )


def test_sticky_differs_from_atari57_only_in_actions() -> None:
    plain = load_config(CONF, ["+experiment=atari57"])
    sticky = load_config(CONF, ["+experiment=atari57_sticky"])
    assert (sticky.env.repeat_action_probability, sticky.env.full_action_space) == (0.25, True)
    fields = ("model", "vtrace", "optim", "runtime", "total_frames", "eval")
    assert all(getattr(plain, f) == getattr(sticky, f) for f in fields)


def test_atari57_sweep_is_57_games_by_3_seeds() -> None:
    jobs = sweep_jobs("atari57")
    assert len(jobs) == 57 * 3
    pairs = [(job["env.game"], int(job["seed"])) for job in jobs]
    assert pairs == list(itertools.product(atari57(), [1, 2, 3]))


def test_sticky_sweeps_the_same_jobs_as_atari57() -> None:
    assert sweep_jobs("atari57_sticky") == sweep_jobs("atari57")


def test_classic5_sweep_is_its_five_games_by_3_seeds() -> None:
    jobs = sweep_jobs("classic5")
    assert [(job["env.game"], int(job["seed"])) for job in jobs] == list(
        itertools.product(CLASSIC5, [1, 2, 3])
    )


def test_atari5_is_aitchison_et_als_five_games_with_the_defaults_for_10m_frames() -> None:
    jobs = sweep_jobs("atari5")
    assert [(job["env.game"], job["seed"]) for job in jobs] == [(g, "1") for g in ATARI5]
    assert ATARI5 == ("battle_zone", "double_dunk", "name_this_game", "phoenix", "qbert")
    assert not set(ATARI5) >= set(CLASSIC5)  # two different sets, two names
    assert len(sweep_jobs("atari5", "seed=1,2,3")) == 15
    cfg = load_config(CONF, ["+experiment=atari5", "env.game=phoenix"])
    defaults = load_config(CONF, ["env=atari", "env.game=phoenix"])
    assert cfg.total_frames == 10_000_000
    for group in ("env", "model", "vtrace", "optim", "runtime"):  # the defaults, unchanged
        assert getattr(cfg, group) == getattr(defaults, group)


def test_dev5_is_the_dev_set_apart_from_atari5_with_the_defaults_for_3m_frames() -> None:
    jobs = sweep_jobs("dev5")
    assert [(job["env.game"], job["seed"]) for job in jobs] == [(g, "1") for g in DEV5]
    assert DEV5 == ("pong", "breakout", "beam_rider", "space_invaders", "robotank")
    assert not set(DEV5) & set(ATARI5)  # what is tuned on is never what is reported
    cfg = load_config(CONF, ["+experiment=dev5", "env.game=robotank"])
    defaults = load_config(CONF, ["env=atari", "env.game=robotank"])
    assert cfg.total_frames == 3_000_000
    for group in ("env", "model", "vtrace", "optim", "runtime"):
        assert getattr(cfg, group) == getattr(defaults, group)


def test_command_line_narrows_the_sweep() -> None:
    jobs = sweep_jobs("atari57", "env.game=pong,breakout", "seed=1")
    assert jobs == [{"env.game": "pong", "seed": "1"}, {"env.game": "breakout", "seed": "1"}]


def test_impala_paper_is_the_papers_recipe_whatever_the_defaults() -> None:
    cfg = load_config(CONF, ["+experiment=impala_paper"])
    o, v, r = cfg.optim, cfg.vtrace, cfg.runtime
    assert (o.name, o.tf_style, o.lr, o.eps, o.alpha, o.momentum) == (
        "rmsprop",
        True,
        0.0006,
        0.01,
        0.99,
        0.0,
    )
    assert (o.grad_clip, o.anneal_lr, o.epochs, o.minibatches) == (40.0, True, 1, 1)
    assert r.prefetch
    assert (v.discount, v.rho_bar, v.c_bar, v.pg_rho_bar, v.lambda_) == (0.99, 1.0, 1.0, 1.0, 1.0)
    assert (v.baseline_cost, v.entropy_cost, v.reward_clip) == (0.5, 0.01, 1.0)
    assert (v.normalize_advantages, v.pg_clip) == (False, 0.0)
    assert (r.batch_size, r.unroll_length) == (32, 20)
    assert cfg.model._target_ == "stampede.models.AtariNet"  # the shallow network of Fig. 3
    assert (cfg.model.hidden_size, cfg.model.use_lstm) == (256, False)
    assert sweep_jobs("impala_paper") == [{}]


def test_pong_quick_is_a_single_run() -> None:
    assert sweep_jobs("pong_quick") == [{}]


def test_every_swept_game_is_an_ale_game() -> None:
    assert set(atari57()) <= set(atari_games())
