"""Stampede's population-based training as a Hydra sweeper: ``hydra/sweeper=pbt``."""
