"""Median/MAD reference of the bank and the standardized client deviations.

Eqs. ``coord_median``, ``bank_median``, ``bank_mad_raw``, ``bank_mad``, ``z_layer``, ``z_full`` and
``client_score``. Medians follow numpy's convention: for an even count, the mean of the two middle values.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Largest standardized deviation ``|z|`` a client may have in any coordinate: 2**26 = 1/sqrt(eps) of
#: float64. Beyond it, the client's squared deviation (what k-means distances, mixture variances and
#: likelihoods sum) is more than 1/eps times that of a client one robust unit away, so in any sum that
#: includes it the others' contributions fall below float64 resolution (and far enough out, overflow
#: to inf/NaN). Such a client is rejected as invalid before the mixture sees it.
MAX_DEVIATION = float(2**26)


_BLOCK_ROWS = 4096  # rows per block: a sorted block of 200 float64 columns (6.5 MB) stays in cache
_PARALLEL_ELEMENTS = 1 << 20  # below this many values one thread is faster than two


def _median_of_sorted(sorted_rows: np.ndarray) -> np.ndarray:
    # sorted_rows: (D, n), each row ascending; numpy's convention for even n.
    n = sorted_rows.shape[1]
    middle = n // 2
    if n % 2:
        return sorted_rows[:, middle].astype(np.float64)
    return (sorted_rows[:, middle - 1].astype(np.float64) + sorted_rows[:, middle]) / 2.0


def _kth_deviations(flat: np.ndarray, n: int, median: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k-th and (k+1)-th smallest (0-based; the second ``inf`` when ``k = n - 1``) of ``|s - median|`` in
    every row of a row-sorted (D, n) block ``flat``.

    Split at ``p = n // 2``, a sorted row is ``s[:p] <= median <= s[p:]``, so its deviations are two sorted
    runs: ``median - s[p-1-i]`` (i = 0, 1, ...) and ``s[p+j] - median`` (j = 0, 1, ...). How many of the k+1
    smallest come from the left run is found by bisection: log2(n) steps of one gather per run and row,
    instead of sorting the n deviations. The k-th smallest is then the larger of the two runs' last taken
    values, and the (k+1)-th the smaller of their next ones.
    """
    p = n // 2
    a, b = p, n - p  # lengths of the left and right runs
    base = np.arange(median.shape[0]) * n
    left, right = base + (p - 1), base + p  # flat index of left[0] and right[0] per row

    def left_run(i):
        return median - flat[left - i]

    def right_run(j):
        return flat[right + j] - median

    lo = np.full(median.shape, max(0, k + 1 - b))  # taken from the left run: in [lo, hi]
    hi = np.full(median.shape, min(k + 1, a))
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        i = (lo + hi) >> 1  # i < a and j = k + 1 - i >= 1 while lo < hi
        j = k + 1 - i
        too_few_left = right_run(np.minimum(j - 1, b - 1)) > left_run(np.minimum(i, a - 1))
        lo = np.where(open_ & too_few_left, i + 1, lo)
        hi = np.where(open_ & ~too_few_left, i, hi)
    j = k + 1 - lo
    last_left = np.where(lo > 0, left_run(np.clip(lo - 1, 0, max(a - 1, 0))), -np.inf)
    last_right = np.where(j > 0, right_run(np.clip(j - 1, 0, b - 1)), -np.inf)
    next_left = np.where(lo < a, left_run(np.clip(lo, 0, max(a - 1, 0))), np.inf)
    next_right = np.where(j < b, right_run(np.clip(j, 0, b - 1)), np.inf)
    return np.maximum(last_left, last_right), np.minimum(next_left, next_right)


def _median_mad_block(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and (unfloored) MAD of every row of a (rows, n) block; sorts ``block`` in place."""
    block.sort(axis=1)
    n = block.shape[1]
    median = _median_of_sorted(block)
    flat = block.reshape(-1)
    if n % 2:
        mad, _ = _kth_deviations(flat, n, median, n // 2)
    else:
        lower, upper = _kth_deviations(flat, n, median, n // 2 - 1)
        mad = (lower + upper) / 2.0
    return median, mad


def median_mad_blocks(
    read_block, n_rows: int, n_columns: int, mad_floor: float = 0.0, dtype=np.float64
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`median_mad` of a (D, n) array given by blocks of rows: ``read_block(rows, out)`` writes rows
    ``rows`` (a slice) into ``out`` (a (rows, n) array of ``dtype``, float32 or float64, that is then sorted in
    place; float32 only for values that are exactly float32, as results are computed in float64). Blocks run on
    up to two threads (numpy's sort and gathers release the GIL), each thread reusing one buffer, so the
    whole array is never copied or sorted at once and no new memory is touched per block."""
    median, mad = np.empty(n_rows), np.empty(n_rows)
    buffers = threading.local()

    def work(rows: slice) -> None:
        buffer = getattr(buffers, "block", None)
        if buffer is None:
            buffer = buffers.block = np.empty((_BLOCK_ROWS, n_columns), dtype=dtype)
        block = buffer[: rows.stop - rows.start]
        read_block(rows, block)
        median[rows], mad[rows] = _median_mad_block(block)

    _run_blocks(
        work,
        [slice(start, min(start + _BLOCK_ROWS, n_rows)) for start in range(0, n_rows, _BLOCK_ROWS)],
        n_rows * n_columns,
    )
    np.maximum(mad, mad_floor, out=mad)
    return median, mad


def _run_blocks(work, blocks: list[slice], n_values: int) -> None:
    """``work(block)`` for every block, on two threads when there are at least 2**20 values in all and
    two cores (numpy's sort, partition and gathers release the GIL), else one after the other."""
    threads = min(2, os.cpu_count() or 1, len(blocks))
    if threads > 1 and n_values >= _PARALLEL_ELEMENTS:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(work, blocks))
    else:
        for rows in blocks:
            work(rows)


def median_mad(columns: np.ndarray, mad_floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate-wise median and floored MAD of ``n`` vectors stored as the columns of a (D, n) array.

    Each block of rows is sorted (contiguous rows: numpy's SIMD sort), the median read from the middle,
    and the MAD selected from the sorted row by bisection (the deviations of a sorted row from its median
    are two sorted runs), so only one sort is needed; blocks of 4,096 rows stay in cache and run on two
    threads. Exactly numpy's ``median`` of the values and of their absolute deviations.

    Parameters
    ----------
    columns : ndarray of shape (D, n)
        One vector per column (the bank stores signatures this way). Not modified.
    mad_floor : float, default=0.0
        Lower bound on every MAD coordinate (eq. ``bank_mad``, the paper's epsilon).

    Returns
    -------
    median : ndarray of shape (D,)
        Eq. ``bank_median``.
    mad : ndarray of shape (D,)
        Eq. ``bank_mad``: ``max(median(|b - median|), mad_floor)``.

    Examples
    --------
    >>> median, mad = median_mad(np.array([[1.0, 2.0, 4.0, 10.0]]), mad_floor=1e-6)
    >>> median, mad
    (array([3.]), array([1.5]))
    """
    if columns.ndim != 2 or columns.shape[1] == 0:
        raise ValueError(f"median_mad needs a (D, n) array with n >= 1, got shape {columns.shape}")

    def read_block(rows, out):
        out[...] = columns[rows]

    dtype = np.float32 if columns.dtype == np.float32 else np.float64
    return median_mad_blocks(read_block, columns.shape[0], columns.shape[1], mad_floor, dtype)


def standardize(signatures: np.ndarray, median: np.ndarray, mad: np.ndarray) -> np.ndarray:
    """Bank-standardized features ``z = (s - m) / d`` (eqs. ``z_layer``, ``z_full``); (N, D) -> (N, D).

    Overflow gives ``inf`` silently; :func:`largest_deviations` finds it.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        features = np.subtract(signatures, median, dtype=np.float64)
        features /= mad  # in place: one (N, D) array, not two
        return features


def largest_deviations(features: np.ndarray) -> np.ndarray:
    """``max_r |z_i[r]|`` per client, NaN as ``inf``; (N, D) -> (N,). Compare with :data:`MAX_DEVIATION`."""
    if features.shape[1] == 0:
        return np.zeros(features.shape[0])
    largest = np.maximum(features.max(axis=1), -features.min(axis=1))  # no (N, D) |z| array
    return np.where(np.isnan(largest), np.inf, largest)


def deviation_scores(features: np.ndarray) -> np.ndarray:
    """Client deviation ``delta_i = median_r |z_i[r]|`` (eq. ``client_score``); (N, D) -> (N,).

    numpy's median (NaN for a row with a NaN), computed row by row in a reused buffer of ``|z_i|``
    partitioned in place (``np.median`` would build the (N, D) magnitudes and partition a copy), half of
    the clients on each of two threads when the array is large."""
    n_rows, n_features = features.shape
    if n_features == 0:
        return np.median(np.abs(features), axis=1)
    middle = n_features // 2
    kth = [middle] if n_features % 2 else [middle - 1, middle]
    scores = np.empty(n_rows)
    buffers = threading.local()

    def work(rows: slice) -> None:
        magnitudes = getattr(buffers, "row", None)
        if magnitudes is None:
            magnitudes = buffers.row = np.empty(n_features)
        for row in range(rows.start, rows.stop):
            np.abs(features[row], out=magnitudes)
            magnitudes.partition(kth)  # NaNs sort last: after the middle, if any
            if np.isnan(magnitudes[middle:]).any():
                scores[row] = np.nan
            elif n_features % 2:
                scores[row] = magnitudes[middle]
            else:
                scores[row] = (magnitudes[middle - 1] + magnitudes[middle]) / 2.0

    half = (n_rows + 1) // 2
    _run_blocks(work, [slice(0, half), slice(half, n_rows)] if n_rows > 1 else [slice(0, n_rows)], features.size)
    return scores
