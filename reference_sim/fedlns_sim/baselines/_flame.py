"""FLAME (Nguyen et al. 2022): cluster by direction, keep the majority, clip, average, add noise."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._stack import AggregationResult, ClientId, Stack, Updates, clip_factors


def flame(
    updates: Updates,
    num_examples: Mapping[ClientId, float],
    *,
    random_state: Any = None,
    noise_scale: float = 1e-3,
    min_samples: int = 1,
    weighted: bool = False,
    check_finite: bool = True,
) -> AggregationResult:
    """FLAME (Nguyen et al. 2022): cluster, keep the majority, clip, add noise.

    1. HDBSCAN (``sklearn.cluster.HDBSCAN``, ``metric="precomputed"``) on the pairwise cosine
       distances of the flattened updates, ``min_cluster_size = n // 2 + 1``, ``min_samples = 1``
       and ``allow_single_cluster=True`` as in FLAME's reference implementation (without the
       last, a majority-size cluster could never be found and everyone would be kept).
    2. Keep the largest cluster; if every client is noise, keep everyone.
    3. Clip each kept update to ``S``, the median L2 norm over *all* clients of the round.
    4. Average the clipped kept updates (plain mean as in FLAME; ``weighted=True`` for sample
       weights) and add Gaussian noise with standard deviation ``noise_scale * S`` (0.001 S) to
       every coordinate.

    Parameters
    ----------
    random_state : None, int, sequence of int or numpy.random.Generator
        Seeds the noise through ``numpy.random.default_rng``. A fixed int gives the same noise in
        every round; pass a Generator that lives for the run, or e.g. ``[seed, round]``.
    noise_scale : float, default 1e-3
        Noise standard deviation as a fraction of ``S``.
    min_samples : int, default 1
        HDBSCAN's ``min_samples``.
    weighted : bool, default False
        Sample-weight the kept updates instead of a plain mean.

    Returns
    -------
    AggregationResult
        The noisy mean of the clipped kept updates; ``kept`` the largest cluster; ``details``:
        HDBSCAN's ``labels``, ``median_norm`` (``S``), ``noise_sigma``, each client's ``norms``
        and clip ``factors``, ``min_cluster_size``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> base = rng.normal(size=50)
    >>> updates = {i: {"w": base + 0.1 * rng.normal(size=50)} for i in range(6)}
    >>> updates[6] = {"w": -base}
    >>> update = flame(updates, {i: 1 for i in range(7)}, random_state=0)
    >>> float(np.corrcoef(update["w"], base)[0, 1]) > 0.99
    True
    """
    if not (math.isfinite(noise_scale) and noise_scale >= 0):
        raise ValueError(f"noise_scale must be finite and >= 0, got {noise_scale!r}")
    stack = Stack(updates, num_examples, check_finite)
    n = stack.n
    gram = stack.gram()
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    labels = cluster_labels(cosine_distances(gram), min_samples)
    kept_rows = largest_cluster(labels)
    median_norm = float(np.median(norms))
    factors = clip_factors(norms, median_norm)
    coefficients = np.zeros(n)
    if weighted:
        assert stack.counts is not None  # num_examples is required here
        share = stack.counts[kept_rows] / stack.counts[kept_rows].sum()
    else:
        share = np.full(len(kept_rows), 1.0 / len(kept_rows))
    coefficients[kept_rows] = share * factors[kept_rows]
    update = stack.combine(coefficients)
    sigma = noise_scale * median_norm
    if sigma > 0:
        generator = np.random.default_rng(random_state)
        for key in stack.keys:
            noise_dtype = update[key].dtype if update[key].dtype in (np.float32, np.float64) else np.float64
            noise = generator.standard_normal(update[key].shape, dtype=noise_dtype)
            update[key] += (sigma * noise).astype(update[key].dtype, copy=False)
    details = {
        "labels": {cid: int(label) for cid, label in zip(stack.ids, labels)},
        "median_norm": median_norm,
        "noise_sigma": sigma,
        "norms": stack.by_client(norms),
        "factors": stack.by_client(factors),
        "min_cluster_size": n // 2 + 1,
    }
    return stack.result(update, kept_rows, details)


def cosine_distances(gram: np.ndarray) -> np.ndarray:
    """Pairwise cosine distances 1 - cos(u_i, u_j) from a Gram matrix, (n, n) in [0, 2].

    A zero update has no direction: its cosine similarity to every other update is taken as 0.
    """
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    scale = np.outer(norms, norms)
    similarity = np.divide(gram, scale, out=np.zeros_like(gram), where=scale > 0)
    distances = np.clip(1.0 - similarity, 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)
    return distances


def cluster_labels(distances: np.ndarray, min_samples: int) -> np.ndarray:
    """HDBSCAN labels on precomputed cosine distances; -1 marks noise. (n,) int."""
    n = len(distances)
    if n < 3:
        # HDBSCAN needs clusters of at least 2 and a majority of n // 2 + 1: one cluster of all
        return np.zeros(n, dtype=int)
    from sklearn.cluster import HDBSCAN

    clusterer = HDBSCAN(
        min_cluster_size=n // 2 + 1, min_samples=min_samples, metric="precomputed", allow_single_cluster=True, copy=True
    )
    return clusterer.fit(distances).labels_


def largest_cluster(labels: np.ndarray) -> np.ndarray:
    """Rows of the largest cluster (ties: smallest label); every row if all are noise."""
    clustered = labels[labels >= 0]
    if clustered.size == 0:
        return np.arange(len(labels))
    values, sizes = np.unique(clustered, return_counts=True)
    return np.flatnonzero(labels == values[np.argmax(sizes)])
