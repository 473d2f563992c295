"""Median/MAD reference of the bank and the standardized client deviations.

Eqs. ``coord_median``, ``bank_median``, ``bank_mad_raw``, ``bank_mad``, ``z_layer``, ``z_full`` and
``client_score``. Medians follow numpy's convention: for an even count, the mean of the two middle values.
"""

from __future__ import annotations

import numpy as np

#: Largest standardized deviation ``|z|`` a client may have in any coordinate: 2**26 = 1/sqrt(eps) of
#: float64. Beyond it, the client's squared deviation (what k-means distances, mixture variances and
#: likelihoods sum) is more than 1/eps times that of a client one robust unit away, so in any sum that
#: includes it the others' contributions fall below float64 resolution (and far enough out, overflow
#: to inf/NaN). Such a client is rejected as invalid before the mixture sees it.
MAX_DEVIATION = float(2**26)


def _median_of_sorted(sorted_rows: np.ndarray) -> np.ndarray:
    # sorted_rows: (D, n), each row ascending; numpy's convention for even n.
    n = sorted_rows.shape[1]
    middle = n // 2
    if n % 2:
        return sorted_rows[:, middle].copy()
    return (sorted_rows[:, middle - 1] + sorted_rows[:, middle]) / 2.0


def median_mad(columns: np.ndarray, mad_floor: float = 0.0, *,
               overwrite: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate-wise median and floored MAD of ``n`` vectors stored as the columns of a (D, n) array.

    Row-wise sorting of a (D, n) array is contiguous and SIMD-accelerated in numpy, several times
    faster than ``np.median(..., axis=0)`` over the (n, D) layout for the bank sizes used here.

    Parameters
    ----------
    columns : ndarray of shape (D, n)
        One vector per column (the bank stores signatures this way).
    mad_floor : float, default=0.0
        Lower bound on every MAD coordinate (eq. ``bank_mad``, the paper's epsilon).
    overwrite : bool, default=False
        Sort ``columns`` in place instead of a copy (saves one (D, n) array).

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
    if overwrite:
        columns.sort(axis=1)
        ordered = columns
    else:
        ordered = np.sort(columns, axis=1)
    median = _median_of_sorted(ordered)
    deviations = np.subtract(ordered, median[:, None])
    np.abs(deviations, out=deviations)
    deviations.sort(axis=1)
    mad = _median_of_sorted(deviations)
    np.maximum(mad, mad_floor, out=mad)
    return median, mad


def standardize(signatures: np.ndarray, median: np.ndarray, mad: np.ndarray) -> np.ndarray:
    """Bank-standardized features ``z = (s - m) / d`` (eqs. ``z_layer``, ``z_full``); (N, D) -> (N, D).

    Overflow gives ``inf`` silently; :func:`largest_deviations` finds it.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return (signatures - median) / mad


def largest_deviations(features: np.ndarray) -> np.ndarray:
    """``max_r |z_i[r]|`` per client, NaN as ``inf``; (N, D) -> (N,). Compare with :data:`MAX_DEVIATION`."""
    if features.shape[1] == 0:
        return np.zeros(features.shape[0])
    largest = np.max(np.abs(features), axis=1)
    return np.where(np.isnan(largest), np.inf, largest)


def deviation_scores(features: np.ndarray) -> np.ndarray:
    """Client deviation ``delta_i = median_r |z_i[r]|`` (eq. ``client_score``); (N, D) -> (N,)."""
    return np.median(np.abs(features), axis=1)
