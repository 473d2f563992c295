"""fedlns_sim: a simulator that reproduces the FedLNS paper's three-model experiments.

Modules, in reading order: ``config`` (one dataclass and the presets), ``data``, ``partitions``, ``attacks``,
``models``, ``client`` (one function trains one client), ``methods`` (the server step), ``metrics``, ``run``
(the round loop), ``sweep``, ``report`` and ``cli``. The baseline rules live in ``aggregators``.
"""

from .config import Config, make_config
from .run import run

__all__ = ["Config", "make_config", "run"]
