"""Norm-Bounded FedAvg (Sun et al. 2019): FedAvg of updates clipped to an L2 norm bound."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ._stack import AggregationResult, ClientId, Stack, Updates, clip_factors


def norm_bounded_fedavg(
    updates: Updates,
    num_examples: Mapping[ClientId, float],
    *,
    bound: float | str = "median",
    check_finite: bool = True,
) -> AggregationResult:
    """FedAvg of updates clipped to an L2 norm bound (Sun et al. 2019, "Can you really backdoor").

    Each update is scaled by ``min(1, bound / ||u_i||)``, with ``||u_i||`` the L2 norm of the
    client's whole flattened update (all keys together), then the clipped updates are averaged
    with FedAvg's sample weights.

    Parameters
    ----------
    updates, num_examples
        As in :func:`fedavg`.
    bound : float or "median", default "median"
        The norm bound. The paper gives none. A fixed constant would have to be retuned for every
        model, learning rate and epoch count (update norms of the paper's three families differ by
        orders of magnitude), so the default is data-driven: the median update norm of this round.
        While fewer than half of the round's clients are malicious, the median is a benign
        client's norm, so no update can outweigh a typical benign one; benign updates above the
        median are shortened only moderately. Pass a number to use a fixed bound.
    check_finite : bool, default True
        As in :func:`fedavg`.

    Returns
    -------
    AggregationResult
        The aggregated update; every client kept; ``details``: the ``bound`` used, each client's
        ``norms`` and clip ``factors``.

    Examples
    --------
    >>> updates = {"a": {"w": np.array([3.0, 4.0])}, "b": {"w": np.array([0.0, 1.0])}}
    >>> norm_bounded_fedavg(updates, {"a": 1, "b": 1}, bound=1.0)["w"]
    array([0.3, 0.9])
    """
    stack = Stack(updates, num_examples, check_finite)
    norms = np.sqrt(stack.squared_norms())
    if isinstance(bound, str):
        if bound != "median":
            raise ValueError(f"bound must be a positive number or 'median', got {bound!r}")
        limit = float(np.median(norms))
    else:
        limit = float(bound)
        if not (math.isfinite(limit) and limit > 0):
            raise ValueError(f"bound must be a positive finite number or 'median', got {bound!r}")
    factors = clip_factors(norms, limit)
    assert stack.counts is not None  # num_examples is required here
    weights = stack.counts / stack.counts.sum()
    details = {"bound": limit, "norms": stack.by_client(norms), "factors": stack.by_client(factors)}
    return stack.result(stack.combine(weights * factors), details=details)
