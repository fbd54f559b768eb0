"""``hydra/sweeper=pbt``: the population's settings (read by ``stampede.search.pbt.Settings``)."""

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class PBTSweeperConf:
    _target_: str = "hydra_plugins.stampede_pbt.sweeper.PBTSweeper"
    members: int = 4
    interval_frames: int = 1_000_000  # frames each member trains between two rankings
    fraction: float = 0.25  # bottom part that copies a member of the top part; 0: none
    perturb: list[float] = field(default_factory=lambda: [0.8, 1.2])
    resample_probability: float = 0.25
    # key: interval(low, high) or tag(log, interval(low, high)), as Optuna's sweeper takes them
    params: dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/sweeper", name="pbt", node=PBTSweeperConf, provider="stampede"
)
