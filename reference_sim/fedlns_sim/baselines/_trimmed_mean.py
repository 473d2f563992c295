"""Coordinate-wise trimmed mean (Yin et al. 2018)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ._stack import AggregationResult, ClientId, Stack, Updates


def trimmed_mean(
    updates: Updates,
    num_examples: Mapping[ClientId, float] | None = None,
    *,
    trim_fraction: float,
    check_finite: bool = True,
) -> AggregationResult:
    """Coordinate-wise trimmed mean (Yin et al. 2018).

    For every coordinate, the ``k = floor(trim_fraction * n)`` largest and ``k`` smallest client
    values are dropped and the remaining ``n - 2k`` are averaged without weights (see
    :func:`trimmed_count`; the same rounding as ``scipy.stats.trim_mean``). The paper sets
    ``trim_fraction`` to the population malicious fraction (``tab:app_robust_agg_params``): 0.4
    with 20 clients trims 8 per side and averages the middle 4. Example counts are accepted for
    the common signature and ignored.

    Parameters
    ----------
    trim_fraction : float
        Fraction trimmed from each side, in [0, 0.5). 0 gives the plain (unweighted) mean.

    Returns
    -------
    AggregationResult
        The trimmed mean; every client kept; ``details["trimmed_per_side"]`` is ``k``.

    Examples
    --------
    >>> updates = {i: {"w": np.array([v])} for i, v in enumerate([-50.0, 1.0, 2.0, 3.0, 90.0])}
    >>> trimmed_mean(updates, None, trim_fraction=0.2)["w"]
    array([2.])
    """
    stack = Stack(updates, None, check_finite)
    cut = trimmed_count(trim_fraction, stack.n)
    n = stack.n

    def middle_mean(columns: np.ndarray) -> np.ndarray:
        return columns[:, cut : n - cut].mean(axis=1, dtype=np.float64)

    return stack.result(stack.reduce_sorted(middle_mean), details={"trimmed_per_side": cut})


def trimmed_count(trim_fraction: float, n_clients: int) -> int:
    """Number of values trimmed from *each* side: floor(trim_fraction * n_clients).

    The floor is taken after adding 1e-9, so that products such as 0.29 * 100 that land just
    below an integer in binary floating point still count as that integer.

    Examples
    --------
    >>> trimmed_count(0.4, 20), trimmed_count(0.1, 20), trimmed_count(0.25, 10)
    (8, 2, 2)
    """
    if not (0.0 <= trim_fraction < 0.5):
        raise ValueError(f"trim_fraction must be in [0, 0.5), got {trim_fraction!r}")
    return int(math.floor(trim_fraction * n_clients + 1e-9))
