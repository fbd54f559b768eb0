"""What an evaluation leaves behind: ``eval.json``, ``eval_history.jsonl``, ``eval/*`` metrics
and the printed summary.

``eval.json`` in a run directory holds the run's latest evaluation; ``stampede-report`` and the
notebooks read it. ``EvalRecord`` is its one definition: the evaluation writes it and the report
reads it back with ``read_eval``, so the file's fields are named in this module only.
``eval_history.jsonl`` keeps every evaluation of the run, oldest first, with the game lengths and
the video. The ``eval/*`` metrics go to every sink of the run's ``MetricLogger``.

Nothing here imports torch: the report reads results without it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stampede.rundir.files import EVAL_FILE, EVAL_HISTORY_FILE, write_text_atomic

if TYPE_CHECKING:
    from stampede.config.schema import Config
    from stampede.eval.protocol import Evaluation

VIDEO_KEY = "eval/video"


@dataclasses.dataclass(frozen=True)
class EvalRecord:
    """One evaluation of one run as ``eval.json`` holds it: what was evaluated and how it scored.

    ``mean`` ... ``max`` are the statistics of ``returns``. ``path`` is the file a record was read
    from (None for one not read from disk); it is not written.
    """

    game: str  # ALE id (Atari) or gymnasium id
    env_kind: str
    seed: int  # the training run's seed
    experiment: str
    frames: int  # training frames of the evaluated policy
    episodes: int
    greedy: bool
    returns: tuple[float, ...]
    mean: float
    median: float
    std: float
    min: float
    max: float
    checkpoint: str | None  # the checkpoint file evaluated; None for the live learner
    agent_games: int = 1  # games the evaluated agent was trained on (> 1: one multi-task agent)
    path: Path | None = None

    @classmethod
    def of(
        cls,
        evaluation: Evaluation,
        cfg: Config,
        frames: int,
        checkpoint: str | None,
        task: int = 0,
    ) -> EvalRecord:
        """The record of ``evaluation``, a policy of the run ``cfg`` after ``frames`` frames,
        on its game ``task`` (the one game of a single-game run)."""
        return cls(
            game=cfg.env.tasks[task],
            env_kind=cfg.env.kind,
            seed=cfg.seed,
            experiment=cfg.name,
            frames=int(frames),
            episodes=evaluation.episodes,
            greedy=cfg.eval.greedy,
            returns=evaluation.returns,
            mean=evaluation.mean,
            median=evaluation.median,
            std=evaluation.std,
            min=evaluation.min,
            max=evaluation.max,
            checkpoint=checkpoint,
            agent_games=len(cfg.env.tasks),
        )

    def to_json(self) -> dict[str, Any]:
        """The content of eval.json (every field but ``path``, in declaration order)."""
        fields = dataclasses.asdict(self)
        del fields["path"]
        return fields | {"returns": list(self.returns)}


def read_eval(path: Path) -> EvalRecord:
    """The record in an eval.json file.

    Raises OSError (unreadable), ValueError (not JSON, or a value of the wrong type), TypeError
    (not a JSON object) or KeyError (a field missing).
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    return EvalRecord(
        game=str(data["game"]),
        env_kind=str(data["env_kind"]),
        seed=int(data["seed"]),
        experiment=str(data["experiment"]),
        frames=int(data["frames"]),
        episodes=int(data["episodes"]),
        greedy=bool(data["greedy"]),
        returns=tuple(float(r) for r in data["returns"]),
        mean=float(data["mean"]),
        median=float(data["median"]),
        std=float(data["std"]),
        min=float(data["min"]),
        max=float(data["max"]),
        checkpoint=None if data["checkpoint"] is None else str(data["checkpoint"]),
        agent_games=int(data.get("agent_games", 1)),  # absent before multi-task runs
        path=Path(path),
    )


def write_eval(run_dir: Path, record: EvalRecord, evaluation: Evaluation) -> Path:
    """Write eval.json atomically (a reader never sees half a file); append to the history.

    Raises OSError if the run directory cannot take them.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / EVAL_FILE
    write_text_atomic(path, json.dumps(record.to_json(), indent=2) + "\n")
    video = str(evaluation.video) if evaluation.video is not None else None
    history = record.to_json() | {"lengths": list(evaluation.lengths), "video": video}
    with (run_dir / EVAL_HISTORY_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(history) + "\n")
    return path


def eval_metrics(
    evaluation: Evaluation, frames: int, game: str | None = None
) -> dict[str, float | int]:
    """The ``eval/*`` metrics of one evaluation, at ``env/frames`` (the names in the README);
    ``eval/<game>/*`` for one game of a multi-task run."""
    prefix = f"eval/{game}" if game else "eval"
    return {
        "env/frames": int(frames),
        f"{prefix}/episode_return": evaluation.mean,
        f"{prefix}/episode_return_median": evaluation.median,
        f"{prefix}/episode_return_std": evaluation.std,
        f"{prefix}/episode_length": evaluation.mean_length,
        f"{prefix}/episodes": evaluation.episodes,
    }


def format_result(
    evaluation: Evaluation, cfg: Config, frames: int, path: Path | None, task: int = 0
) -> str:
    """The statistics of one evaluation (of game ``task``) as a short readable block."""
    env = cfg.env
    protocol = (
        f"whole games, up to {env.noop_max} no-op starts, cap {env.max_episode_frames:,} frames"
        if env.kind == "atari"
        else "whole episodes"
    )
    e = evaluation
    lines = [
        f"evaluation of {env.tasks[task]} (seed {cfg.seed}, {frames:,} training frames)",
        f"  checkpoint: {path}" if path is not None else "",
        f"  {e.episodes} games, {'greedy' if cfg.eval.greedy else 'sampled'} actions, {protocol}",
        f"  return: mean {e.mean:.2f}  median {e.median:.2f}  std {e.std:.2f}  "
        f"min {e.min:.2f}  max {e.max:.2f}",
        f"  mean length: {e.mean_length:.0f} agent steps",
        f"  video: {e.video}" if e.video is not None else "",
    ]
    return "\n".join(line for line in lines if line)
