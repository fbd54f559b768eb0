"""What an evaluation leaves behind (stampede.eval.results): eval.json in the report's format and
read back, the history of every evaluation, the eval/* metrics and the printed summary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from stampede.envs import EnvSettings
from stampede.eval import protocol as ev
from stampede.eval.results import EvalRecord, eval_metrics, format_result, read_eval, write_eval
from stampede.report import report

from .conftest import atari_cfg


def test_eval_json_has_the_report_format_and_report_reads_it(tmp_path: Path) -> None:
    evaluation = ev.Evaluation(returns=(-21.0, -19.0, -20.0), lengths=(800, 900, 850))
    cfg = atari_cfg(greedy=True)
    record = EvalRecord.of(evaluation, cfg, frames=123_456, checkpoint="ckpt.pt")
    write_eval(tmp_path / "run", record, evaluation)
    written = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert list(written) == [
        "game", "env_kind", "seed", "experiment", "frames", "episodes", "greedy",
        "returns", "mean", "median", "std", "min", "max", "checkpoint", "agent_games",
    ]  # fmt: skip
    assert written["agent_games"] == 1  # one agent per game
    assert written["returns"] == [-21.0, -19.0, -20.0]
    assert (written["median"], written["min"], written["max"]) == (-20.0, -21.0, -19.0)
    (read,) = report.collect(tmp_path)
    assert (read.game, read.seed, read.experiment) == ("pong", 2, "atari5")
    assert (read.mean, read.frames, read.episodes, read.greedy) == (-20.0, 123_456, 3, True)


def test_read_eval_gives_back_what_was_written(tmp_path: Path) -> None:
    evaluation = ev.Evaluation(returns=(3.0, 5.0), lengths=(10, 12))
    cfg = dataclasses.replace(
        atari_cfg(), env=EnvSettings(games=["pong", "breakout"], full_action_space=True)
    )
    record = EvalRecord.of(evaluation, cfg, frames=500, checkpoint=None, task=1)
    path = write_eval(tmp_path, record, evaluation)
    read = read_eval(path)
    assert read == dataclasses.replace(record, path=path)
    assert (read.game, read.agent_games, read.checkpoint) == ("breakout", 2, None)


def test_an_eval_json_written_before_multitask_runs_reads_as_one_agent_per_game(
    tmp_path: Path,
) -> None:
    evaluation = ev.Evaluation(returns=(1.0,), lengths=(5,))
    path = write_eval(tmp_path, EvalRecord.of(evaluation, atari_cfg(), 10, None), evaluation)
    old = json.loads(path.read_text())
    del old["agent_games"]
    path.write_text(json.dumps(old))
    assert read_eval(path).agent_games == 1


@pytest.mark.parametrize(
    ("content", "error", "names"),
    [
        ("[1, 2]", TypeError, "expected a JSON object, got list"),
        ('{"game": "pong"}', KeyError, "env_kind"),
        ("{not json", ValueError, "Expecting property name"),
    ],
)
def test_read_eval_of_a_bad_file_raises_what_the_report_skips(
    tmp_path: Path, content: str, error: type[Exception], names: str
) -> None:
    (tmp_path / "eval.json").write_text(content)
    with pytest.raises(error, match=names):
        read_eval(tmp_path / "eval.json")


def test_the_history_keeps_every_evaluation_with_its_lengths_and_video(tmp_path: Path) -> None:
    video = tmp_path / "videos" / "pong_000000000200.mp4"
    first = ev.Evaluation(returns=(1.0, 2.0), lengths=(30, 40))
    second = ev.Evaluation(returns=(4.0,), lengths=(50,), video=video)
    for frames, evaluation in ((100, first), (200, second)):
        record = EvalRecord.of(evaluation, atari_cfg(), frames, checkpoint=None)
        write_eval(tmp_path, record, evaluation)
    lines = (tmp_path / "eval_history.jsonl").read_text().splitlines()
    history = [json.loads(line) for line in lines]
    assert [(h["frames"], h["lengths"], h["video"]) for h in history] == [
        (100, [30, 40], None),
        (200, [50], str(video)),
    ]
    assert json.loads((tmp_path / "eval.json").read_text())["frames"] == 200  # the latest only


def test_eval_metrics_of_one_game_and_of_one_game_of_several() -> None:
    evaluation = ev.Evaluation(returns=(10.0, 30.0), lengths=(100, 300))
    assert eval_metrics(evaluation, 500) == {
        "env/frames": 500,
        "eval/episode_return": 20.0,
        "eval/episode_return_median": 20.0,
        "eval/episode_return_std": 10.0,
        "eval/episode_length": 200.0,
        "eval/episodes": 2,
    }
    multitask = eval_metrics(evaluation, 500, game="pong")
    assert sorted(multitask) == sorted(
        ["env/frames"]
        + [f"eval/pong/{k}" for k in ("episode_return", "episode_return_median")]
        + [f"eval/pong/{k}" for k in ("episode_return_std", "episode_length", "episodes")]
    )


def test_the_printed_summary_names_game_protocol_and_statistics(tmp_path: Path) -> None:
    video = tmp_path / "pong.mp4"
    evaluation = ev.Evaluation(returns=(-21.0, -19.0), lengths=(800, 1000), video=video)
    text = format_result(evaluation, atari_cfg(), 1_234_567, tmp_path / "ckpt.pt")
    assert text.splitlines() == [
        "evaluation of pong (seed 2, 1,234,567 training frames)",
        f"  checkpoint: {tmp_path / 'ckpt.pt'}",
        "  2 games, sampled actions, whole games, up to 30 no-op starts, cap 108,000 frames",
        "  return: mean -20.00  median -20.00  std 1.00  min -21.00  max -19.00",
        "  mean length: 900 agent steps",
        f"  video: {video}",
    ]
    cartpole = dataclasses.replace(
        atari_cfg(greedy=True), env=EnvSettings(kind="gym", gym_id="CartPole-v1")
    )
    text = format_result(dataclasses.replace(evaluation, video=None), cartpole, 100, None)
    assert "checkpoint" not in text
    assert "video" not in text
    assert "  2 games, greedy actions, whole episodes" in text.splitlines()
