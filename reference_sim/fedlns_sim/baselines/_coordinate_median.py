"""Coordinate-wise median (Yin et al. 2018)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._stack import AggregationResult, ClientId, Stack, Updates


def coordinate_median(
    updates: Updates, num_examples: Mapping[ClientId, float] | None = None, *, check_finite: bool = True
) -> AggregationResult:
    """Coordinate-wise median of updates (Yin et al. 2018).

    Example counts are accepted for the common signature and ignored. With an even number of
    clients a coordinate's median is the mean of its two middle values (``numpy.median``).

    Returns
    -------
    AggregationResult
        The coordinate-wise median; every client kept.

    Examples
    --------
    >>> updates = {i: {"w": np.array([v, -v])} for i, v in enumerate([1.0, 5.0, 2.0, 100.0])}
    >>> coordinate_median(updates, None)["w"]
    array([ 3.5, -3.5])
    """
    stack = Stack(updates, None, check_finite)
    low, high = (stack.n - 1) // 2, stack.n // 2

    def middle(columns: np.ndarray) -> np.ndarray:
        # numpy convention: mean of the two middle values for an even number of clients
        return (columns[:, low].astype(np.float64) + columns[:, high]) / 2.0

    return stack.result(stack.reduce_sorted(middle))
