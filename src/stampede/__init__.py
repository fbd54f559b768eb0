"""Stampede: IMPALA (Espeholt et al. 2018, arXiv 1802.01561) in PyTorch, configured with Hydra."""

__version__ = "0.1.0"
