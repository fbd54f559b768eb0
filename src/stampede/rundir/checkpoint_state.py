"""What a training checkpoint holds beside the files, and whether it fits the run that loads it.

``stampede.rundir.checkpoint`` writes and reads the files; this module says what goes into them and
checks what comes out:

- ``save`` and ``resume``: the learner's network and optimizer, how far the run has come
  (``Progress``) and its torch RNG stream, so a resumed run continues where it stopped;
  ``training_digest``: a hash of what training made of them (two reproducible runs: one hash);
- ``config_yaml``: the resolved training config, which evaluation reads back with
  ``stored_config`` (values an older run stored under a name since changed are translated);
- ``fingerprint`` and ``check_fits``: the network and the environment it acts in. A resumed run
  must match all of it, an evaluation the observations and actions (the one check for both).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from stampede.algo.popart import PopArt
from stampede.config.checks import ConfigError
from stampede.config.compose import GROUP_SCHEMAS
from stampede.config.models import network_class
from stampede.config.schema import Config
from stampede.envs import EnvSpec
from stampede.models import ActorCritic
from stampede.rundir import checkpoint
from stampede.rundir.checkpoint import CheckpointError
from stampede.rundir.files import CONFIG_FILE

log = logging.getLogger("stampede")


# Values renamed since older runs stored their config: (group, key, old value, new value).
# Only a stored config is translated; a command line with the old value gets the rename error.
_RENAMED = (("env", "backend", "gymnasium", "python_loop"),)


@dataclass
class Progress:
    """How far a run has come over all its resumes: what a resumed run continues from."""

    frames: int = 0
    updates: int = 0
    generation: int = 0  # bumps on every resume of the run, so actor seeds never repeat
    train_s: float = 0.0  # seconds spent in the training loop before this resume
    torch_rng: torch.Tensor | None = None  # the learner's RNG state at the checkpoint
    task_frames: list[int] = field(default_factory=list)  # multi-task runs: frames per game


def config_yaml(cfg: Config) -> str:
    """The resolved config as YAML: ``config.yaml`` of a run directory, and in every checkpoint."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def fingerprint(cfg: Config, spec: EnvSpec) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the network and the environment it acts in."""
    return {
        "model": cfg.model._target_,
        "model_kwargs": repr(sorted(cfg.model.kwargs().items())),
        "env": cfg.env.name,
        **({"games": list(cfg.env.games)} if cfg.env.games else {}),
        **spec_fingerprint(spec),
    }


def spec_fingerprint(spec: EnvSpec) -> dict[str, Any]:
    """The part of ``fingerprint`` an evaluation must match: what the env gives the network."""
    return {"obs_shape": list(spec.obs_shape), "num_actions": spec.num_actions}


def prepare(run_dir: Path, cfg: Config, model: ActorCritic) -> None:
    """Before training starts: fail now if ``run_dir`` cannot take a checkpoint of ``model``, not
    hours from now, and write the resolved config there (``config.yaml``)."""
    # model + optimizer state (at most two buffers per parameter) + room for the rest
    model_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    checkpoint.check_writable(checkpoint.checkpoint_dir(run_dir), 3 * model_bytes + 2**20)
    (run_dir / CONFIG_FILE).write_text(config_yaml(cfg))


def save(
    run_dir: Path,
    cfg: Config,
    spec: EnvSpec,
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    popart: PopArt | None = None,
) -> Path:
    """Write the run's training state as its newest checkpoint (``checkpoint.save``: atomic,
    checksummed, the newest ``checkpointing.keep`` kept), with PopArt's statistics if the run
    has them. Plain data: it loads ``weights_only``."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "frames": progress.frames,
        "updates": progress.updates,
        "generation": progress.generation,
        "train_s": progress.train_s,
        "torch_rng": torch.get_rng_state(),  # where this process's stream is now
        "task_frames": list(progress.task_frames),
        "config": config_yaml(cfg),
        "fingerprint": fingerprint(cfg, spec),
    }
    if popart is not None:
        state["popart"] = popart.state_dict()
    directory = checkpoint.checkpoint_dir(run_dir)
    path = checkpoint.save(directory, progress.frames, state, keep=cfg.checkpointing.keep)
    log.info(
        "checkpoint %s (frames=%d, updates=%d, training digest %s)",
        path.name,
        progress.frames,
        progress.updates,
        training_digest(state),
    )
    return path


# What training produced, in a checkpoint's state: not its wall time, config text or fingerprint.
_TRAINED = ("model", "optimizer", "popart", "frames", "updates", "torch_rng", "task_frames")


def training_digest(state: Mapping[str, Any]) -> str:
    """SHA-256 (16 hex digits) of the trained part of a checkpoint's ``state``: the network, the
    optimizer's moments and step counts, PopArt's statistics, frames, updates and the RNG stream.
    Two runs with ``runtime.deterministic=true`` and the same seed have the same digest."""
    return checkpoint.content_digest({key: state[key] for key in _TRAINED if key in state})


def resume(
    run_dir: Path,
    cfg: Config,
    spec: EnvSpec,
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    popart: PopArt | None = None,
) -> Progress:
    """Load the run directory's newest readable checkpoint into ``model``, ``optimizer`` and
    ``popart`` if it was written for this network and env (``fingerprint``); the progress to
    continue from (none: a fresh start). CheckpointError (one line) if it does not fit or does
    not load."""
    found = checkpoint.load_latest(checkpoint.checkpoint_dir(run_dir))
    if found is None:
        return Progress()
    path, state = found
    advice = "resume with the same config or use another run directory (hydra.run.dir=...)"
    check_fits(state, fingerprint(cfg, spec), path, advice)
    _check_popart(state, popart, path)
    # The optimizer's settings (lr, eps, betas, ...) are this run's config, its moments the
    # checkpoint's: a run resumed with another optim.eps (as PBT does) uses the new value.
    settings = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        for group, configured in zip(optimizer.param_groups, settings, strict=True):
            group.update(configured)
        if popart is not None and "popart" in state:
            popart.load_state_dict(state["popart"])
    except (KeyError, RuntimeError, ValueError) as error:
        raise CheckpointError(f"{path}: cannot restore: {error}") from None
    progress = Progress(
        frames=int(state["frames"]),
        updates=int(state["updates"]),
        generation=int(state["generation"]) + 1,
        train_s=float(state.get("train_s", 0.0)),  # absent in checkpoints before 0.2
        torch_rng=state["torch_rng"],
        task_frames=[int(f) for f in state.get("task_frames", [])],
    )
    log.info("resumed from %s: frames=%d updates=%d", path, progress.frames, progress.updates)
    return progress


def _check_popart(state: Mapping[str, Any], popart: PopArt | None, path: Path) -> None:
    """A network trained with PopArt outputs normalised values: without its statistics they
    would be read as values, so such a checkpoint resumes only with ``vtrace.popart=true``. The
    other way round is fine: PopArt's statistics start at mean 0, scale 1 (no change)."""
    if popart is None and "popart" in state:
        raise CheckpointError(
            f"{path} was written with vtrace.popart=true (its network's values are normalised); "
            "resume it with vtrace.popart=true"
        )


def check_fits(
    state: Mapping[str, Any], expected: Mapping[str, Any], path: Path, advice: str
) -> None:
    """CheckpointError in one line, naming each difference, unless the fingerprint stored in
    ``state`` has the values of ``expected`` (a ``fingerprint`` or part of one), then ``advice``.

    Network arguments missing from either side count at the constructor's default: a checkpoint
    written before the model schemas listed every argument (``lstm_size``, ``activation``) fits
    the same network today.
    """
    written = state.get("fingerprint") or {}
    diff = "; ".join(
        f"{key}: checkpoint {old!r}, this run {new!r}"
        for key, old, new in _differences(written, expected)
    )
    if diff:
        raise CheckpointError(f"{path} was written for another model or env ({diff}); {advice}")


def _differences(
    written: Mapping[str, Any], expected: Mapping[str, Any]
) -> Iterator[tuple[str, Any, Any]]:
    """(key, written value, expected value) of each key of ``expected`` that differs."""
    for key, new in expected.items():
        old = written.get(key)
        if key == "model_kwargs":
            old_args, new_args = _constructor_args(written), _constructor_args(expected)
            if old_args is not None and new_args is not None:
                for name in sorted(old_args.keys() | new_args.keys()):
                    if old_args.get(name) != new_args.get(name):
                        yield f"model.{name}", old_args.get(name), new_args.get(name)
                continue
        if old != new:
            yield key, old, new


def _constructor_args(fingerprint: Mapping[str, Any]) -> dict[str, Any] | None:
    """Every constructor argument of the fingerprint's network: those it records, the rest at
    the defaults of ``inspect.signature(<model class>)`` (sequences as lists, as configs hold
    them). None where the record does not parse or the class no longer imports."""
    try:
        recorded = dict(ast.literal_eval(fingerprint["model_kwargs"]))
        cls = network_class(fingerprint["model"])
    except (KeyError, TypeError, ValueError, SyntaxError):  # ConfigError is a ValueError
        return None
    parameters = inspect.signature(cls).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (defaults | recorded).items()}


def stored_config(state: Mapping[str, Any], path: Path, **replace: Any) -> Config:
    """The validated training ``Config`` stored in a checkpoint, with the top-level fields in
    ``replace`` (``eval=EvalConfig(...)``, ``device="cpu"``, ...) set instead of the stored ones.

    The network's schema (ResNet, MLP, ...) is the one whose ``_target_`` the stored
    ``model._target_`` names; fields the stored config lacks take the schema's defaults, and
    values renamed since it was written take their new name. CheckpointError (one line) where
    the stored config cannot be used.
    """
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    text = state.get("config")
    if not isinstance(text, str):
        raise CheckpointError(f"{path}: no training config stored in the checkpoint")
    try:
        stored = OmegaConf.create(text)
        if not isinstance(stored, DictConfig) or not isinstance(stored.get("model"), DictConfig):
            raise ConfigError("expected a mapping with a 'model' mapping")
        for group, key, old, new in _RENAMED:
            if OmegaConf.select(stored, f"{group}.{key}") == old:
                OmegaConf.update(stored, f"{group}.{key}", new)
        base = OmegaConf.structured(Config(model=_model_schema(stored.model.get("_target_"))()))
        merged = OmegaConf.merge(base, stored)
        assert isinstance(merged, DictConfig)
        for key, value in replace.items():
            merged[key] = OmegaConf.structured(value) if dataclasses.is_dataclass(value) else value
        cfg = OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ConfigError, ValueError) as error:
        detail = " ".join(str(error).split())  # OmegaConf adds the key and type on more lines
        raise CheckpointError(
            f"{path}: the training config stored in it does not load: {detail}"
        ) from None
    assert isinstance(cfg, Config)
    return cfg


def _model_schema(target: Any) -> type:
    """The model schema whose ``_target_`` is ``target``; ConfigError naming the known ones."""
    schemas = {
        field.default: schema
        for schema in GROUP_SCHEMAS["model"].values()
        for field in dataclasses.fields(schema)
        if field.name == "_target_"
    }
    if target not in schemas:
        raise ConfigError(
            f"model._target_={target!r} is not a network with a schema; "
            f"allowed: {', '.join(sorted(map(str, schemas)))}"
        )
    return schemas[target]
