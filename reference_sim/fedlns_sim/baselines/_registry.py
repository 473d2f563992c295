"""The baselines by name, with their parameters: what the simulator and the command line look up."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._coordinate_median import coordinate_median
from ._fedavg import fedavg
from ._flame import flame
from ._multi_krum import multi_krum
from ._norm_bounded_fedavg import norm_bounded_fedavg
from ._stack import AggregationResult, ClientId, Updates, non_negative_int
from ._trimmed_mean import trimmed_mean


@dataclass(frozen=True)
class _Entry:
    """An aggregation function and the names of its keyword parameters (``check_finite`` aside, which every one
    takes)."""

    function: Callable[..., AggregationResult]
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()


_FUNCTIONS: dict[str, _Entry] = {
    "fedavg": _Entry(fedavg),
    "norm_bounded_fedavg": _Entry(norm_bounded_fedavg, optional=("bound",)),
    "coordinate_median": _Entry(coordinate_median),
    "trimmed_mean": _Entry(trimmed_mean, required=("trim_fraction",)),
    "multi_krum": _Entry(multi_krum, required=("f", "m"), optional=("weighted",)),
    "flame": _Entry(flame, optional=("random_state", "noise_scale", "min_samples", "weighted")),
}
AGGREGATOR_NAMES: tuple[str, ...] = tuple(_FUNCTIONS)


@dataclass(frozen=True)
class Aggregator:
    """A named aggregator with its parameters bound; made by :func:`make_aggregator`.

    Calling it has the core's :data:`fedlns_core.Aggregator` signature, so it can be passed to
    ``ScreeningResult.aggregate(..., aggregator=...)``; the :class:`AggregationResult` it returns
    reads as the update and also says which clients the aggregator kept.
    """

    name: str
    params: dict[str, Any]

    def __call__(self, updates: Updates, num_examples: Mapping[ClientId, float]) -> AggregationResult:
        return _FUNCTIONS[self.name].function(updates, num_examples, **self.params)


def make_aggregator(name: str, **params: Any) -> Aggregator:
    """Bind an aggregator's parameters; unknown names or parameters raise with the allowed ones.

    Parameters
    ----------
    name : str
        One of :data:`AGGREGATOR_NAMES`.
    **params
        The aggregator's keyword parameters (e.g. ``trim_fraction``, ``f``, ``m``, ``bound``,
        ``random_state``, ``check_finite``). Required ones are checked here.

    Raises
    ------
    ValueError
        For an unknown name.
    TypeError
        For an unknown or missing parameter, listing the allowed ones.

    Examples
    --------
    >>> agg = make_aggregator("multi_krum", **paper_parameters(0.4)["multi_krum"])
    >>> agg.params
    {'f': 8, 'm': 12}
    """
    if name not in _FUNCTIONS:
        raise ValueError(f"unknown aggregator {name!r}; choose one of {list(AGGREGATOR_NAMES)}")
    entry = _FUNCTIONS[name]
    allowed = [*entry.required, *entry.optional, "check_finite"]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise TypeError(f"aggregator {name!r}: unknown parameters {unknown}; allowed {allowed}")
    missing = [p for p in entry.required if p not in params]
    if missing:
        raise TypeError(f"aggregator {name!r}: missing required parameters {missing}")
    return Aggregator(name, dict(params))


def paper_parameters(malicious_fraction: float, clients_per_round: int = 20) -> dict[str, dict]:
    """Attack-dependent parameters of ``tab:app_robust_agg_params``, for any round size.

    Trimmed Mean trims the population malicious fraction per side; Multi-Krum uses
    ``f = round(fraction * n)`` (halves round up) and ``m = n - f``. With 20 clients this gives the
    paper's table: 0.0 -> (0, 20), 0.1 -> (2, 18), ..., 0.4 -> (8, 12).

    Returns
    -------
    dict
        ``{"trimmed_mean": {"trim_fraction": ...}, "multi_krum": {"f": ..., "m": ...}}``; merge
        into :func:`make_aggregator` as ``make_aggregator(name, **params.get(name, {}))``.

    Examples
    --------
    >>> paper_parameters(0.3)
    {'trimmed_mean': {'trim_fraction': 0.3}, 'multi_krum': {'f': 6, 'm': 14}}
    """
    if not (0.0 <= malicious_fraction < 0.5):
        raise ValueError(f"malicious_fraction must be in [0, 0.5), got {malicious_fraction!r}")
    clients_per_round = non_negative_int("clients_per_round", clients_per_round)
    if clients_per_round < 1:
        raise ValueError("clients_per_round must be at least 1")
    f = int(math.floor(malicious_fraction * clients_per_round + 0.5 + 1e-9))
    return {
        "trimmed_mean": {"trim_fraction": float(malicious_fraction)},
        "multi_krum": {"f": f, "m": clients_per_round - f},
    }
