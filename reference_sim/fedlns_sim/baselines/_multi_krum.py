"""Multi-Krum (Blanchard et al. 2017): keep the updates closest to their neighbours, average them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._stack import AggregationResult, ClientId, Stack, Updates, non_negative_int


def multi_krum(
    updates: Updates,
    num_examples: Mapping[ClientId, float],
    *,
    f: int,
    m: int,
    weighted: bool = False,
    check_finite: bool = True,
) -> AggregationResult:
    """Multi-Krum (Blanchard et al. 2017): average the ``m`` updates with the lowest Krum scores.

    A client's score is the sum of squared L2 distances from its flattened update to its
    ``n - f - 2`` nearest other updates (at least 1 and at most ``n - 1``, so that rounds with few
    clients, e.g. after FedLNS screening, still work). The ``m`` lowest scores are kept
    (ties: input order; ``m > n`` keeps all) and averaged.

    Parameters
    ----------
    f : int
        Assumed number of malicious clients per round; the paper uses ``round(fraction * 20)``.
    m : int
        Number of updates kept (>= 1); the paper uses ``20 - f``.
    weighted : bool, default False
        False: plain mean of the selected updates, Blanchard et al.'s Multi-Krum and the paper's
        "averaging selected updates" (the paper says "sample-weighted" only for FedAvg).
        True: sample-weighted mean of the selected updates, as Flower's ``MultiKrum`` does.

    Returns
    -------
    AggregationResult
        The mean of the selected updates; ``kept`` the selected clients; ``details``: every
        client's ``scores``, the ``neighbours`` counted, ``f``, ``m`` and ``weighted``.

    Examples
    --------
    >>> updates = {i: {"w": np.array([v])} for i, v in enumerate([0.0, 1.0, 2.0, 30.0])}
    >>> multi_krum(updates, {i: 1 for i in range(4)}, f=1, m=3)["w"]
    array([1.])
    """
    f, m = non_negative_int("f", f), non_negative_int("m", m)
    if m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    stack = Stack(updates, num_examples, check_finite)
    n = stack.n
    distances = squared_distances(stack.gram())
    # n - f - 2 nearest others, kept within [1, n - 1] for small rounds (e.g. after FedLNS screening)
    neighbours = min(max(n - f - 2, 1), n - 1)
    if n == 1:
        scores = np.zeros(1)
    else:
        np.fill_diagonal(distances, np.inf)
        scores = np.sort(distances, axis=1)[:, :neighbours].sum(axis=1)
    # stable sort: equal scores keep input order
    selected = np.sort(np.argsort(scores, kind="stable")[: min(m, n)])
    coefficients = np.zeros(n)
    if weighted:
        assert stack.counts is not None  # num_examples is required here
        coefficients[selected] = stack.counts[selected] / stack.counts[selected].sum()
    else:
        coefficients[selected] = 1.0 / len(selected)
    details = {
        "scores": stack.by_client(scores),
        "neighbours": neighbours,
        "f": f,
        "m": min(m, n),
        "weighted": weighted,
    }
    return stack.result(stack.combine(coefficients), selected, details)


def squared_distances(gram: np.ndarray) -> np.ndarray:
    """Pairwise squared Euclidean distances from a Gram matrix, (n, n), zero diagonal."""
    diagonal = np.diag(gram)
    distances = diagonal[:, None] + diagonal[None, :] - 2.0 * gram
    np.maximum(distances, 0.0, out=distances)  # rounding can leave tiny negatives
    np.fill_diagonal(distances, 0.0)
    return distances
