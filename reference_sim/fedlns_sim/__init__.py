"""fedlns_sim: a simulator that reproduces the FedLNS paper's three-model experiments.

Modules, in reading order: ``config`` (one dataclass, the presets and the registry of names), ``seeds`` (named
random streams), ``data``, ``partitions``, ``attacks``, ``models``, ``client`` (one function trains one client),
``methods`` (the server step), ``metrics``, ``run`` (the round loop) and ``runfiles`` (what a run writes); then
``sweep``, ``report`` (tables and plots), ``archive`` (archive and verify), ``replay`` and ``cli``. The baseline
rules live in the ``baselines`` package, one module a rule. Only ``run`` and what it trains with need torch:
reports read run files anywhere.
"""

from .config import Config, make_config

__all__ = ["Config", "make_config", "run"]


def __getattr__(name):
    if name == "run":  # imported on first use: the round loop needs torch, the report does not
        from .run import run

        return run
    raise AttributeError(f"module 'fedlns_sim' has no attribute {name!r}")
