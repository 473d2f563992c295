"""Baseline aggregation rules of the paper's experiments (``tab:app_baselines``).

Every rule works on client *updates* (deltas ``w_i - w_t``) given as named arrays and returns the
aggregated update, so it composes with FedLNS::

    new_global = screening_result.aggregate(global_params, client_params, rule=coordinate_median)

Two ways to call a rule:

* the plain functions ``fedavg``, ``norm_bounded_fedavg``, ``coordinate_median``, ``trimmed_mean``,
  ``multi_krum`` and ``flame`` have the ``rule`` signature
  ``(updates, num_examples, **params) -> dict[str, np.ndarray]``;
* ``make_aggregator(name, **params)`` returns an :class:`Aggregator`; calling it gives the same
  dict, and ``Aggregator.run`` gives an :class:`AggregationResult` that also says which clients the
  rule kept (Multi-Krum's selection, FLAME's cluster) for detection rates.

Implementation notes. Updates are never stacked into one ``(n_clients, n_parameters)`` matrix: the
rules stream over column blocks of it, ``(n_clients, block)`` float64 at a time, so the extra
memory is a few MiB whatever the model size, and every sum is taken in float64. Given a
:class:`ClientDeltas` view (what :func:`client_updates` returns), the subtraction ``w_i - w_t``
happens inside those blocks too, so a server step never materialises the updates. Pairwise distances
(Multi-Krum, FLAME) come from the Gram matrix accumulated block by block (one BLAS ``syrk`` per
block), never from a loop over client pairs. Outputs have the floating dtype of the inputs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ClientId = Hashable  # the core uses ``str | int``; any hashable id works here
ParamDict = Mapping[str, np.ndarray]
Updates = Mapping[ClientId, ParamDict]

__all__ = [
    "AGGREGATOR_NAMES",
    "AggregationResult",
    "Aggregator",
    "ClientDeltas",
    "apply_update",
    "client_updates",
    "coordinate_median",
    "fedavg",
    "flame",
    "make_aggregator",
    "multi_krum",
    "norm_bounded_fedavg",
    "paper_parameters",
    "trimmed_count",
    "trimmed_mean",
]

# Columns per streamed block: 20 clients x 65536 float64 = 10 MiB, large enough that the Python
# loop costs nothing next to the copying, small enough to stay near the cache.
BLOCK_COLUMNS = 1 << 16


@dataclass(frozen=True)
class AggregationResult:
    """What one aggregation rule did in one round.

    Attributes
    ----------
    update : dict of str to ndarray
        The aggregated update (delta); add it to the global weights.
    kept : tuple of ClientId
        Clients whose updates entered the aggregate, in input order. Coordinate-wise rules
        (median, trimmed mean) and the averaging rules keep every client.
    rejected : tuple of ClientId
        Clients left out (Multi-Krum's unselected clients, FLAME's outliers), in input order.
    selects_clients : bool
        True for rules that pick clients (Multi-Krum, FLAME), so that detection rates mean
        something; False for rules that use every client.
    details : dict
        Method-specific diagnostics as plain Python values (floats, lists, dicts keyed by client),
        e.g. Multi-Krum ``scores``, FLAME ``labels``, ``median_norm``, clip ``factors``.
    """

    update: dict[str, np.ndarray]
    kept: tuple[ClientId, ...]
    rejected: tuple[ClientId, ...]
    selects_clients: bool
    details: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Validation and streaming over column blocks of the (n_clients, n_parameters) update matrix.


class _Stack:
    """Validated updates of n clients, streamed as (n_clients, block) float64 column blocks."""

    def __init__(self, updates: Updates, num_examples: Mapping[ClientId, float] | None,
                 check_finite: bool) -> None:
        if not isinstance(updates, Mapping) or len(updates) == 0:
            raise ValueError("updates must be a non-empty mapping of client id -> named arrays")
        self.ids = tuple(updates)
        self.check_finite = check_finite
        self.counts = None if num_examples is None else _counts(self.ids, num_examples)
        # flat reference weights to subtract while streaming (ClientDeltas), else None
        self.reference: dict[str, np.ndarray] | None = None
        if isinstance(updates, ClientDeltas):
            self._from_deltas(updates)
            return
        first_id = self.ids[0]
        first = updates[first_id]
        if not isinstance(first, Mapping) or len(first) == 0:
            raise ValueError(f"client {first_id!r}: update must be a non-empty mapping of named arrays")
        self.keys = tuple(first)
        self.shapes = {}
        self.dtypes = {}
        self.flat: dict[str, list[np.ndarray]] = {key: [] for key in self.keys}
        key_set = set(self.keys)
        for cid in self.ids:
            update = updates[cid]
            if not isinstance(update, Mapping):
                raise ValueError(f"client {cid!r}: update must be a mapping of named arrays, "
                                 f"got {type(update).__name__}")
            if set(update) != key_set:
                missing = sorted(key_set - set(update))
                extra = sorted(set(update) - key_set)
                raise ValueError(f"client {cid!r}: keys differ from client {first_id!r} "
                                 f"(missing {missing}, extra {extra})")
            for key in self.keys:
                array = np.asarray(update[key])
                if not (np.issubdtype(array.dtype, np.floating)
                        or np.issubdtype(array.dtype, np.integer)):
                    raise ValueError(f"client {cid!r}: key {key!r} has dtype {array.dtype}, "
                                     "expected a real number type")
                expected = self.shapes.setdefault(key, array.shape)
                if array.shape != expected:
                    raise ValueError(f"client {cid!r}: key {key!r} has shape {array.shape}, "
                                     f"expected {expected}")
                self.dtypes.setdefault(key, []).append(array.dtype)
                self.flat[key].append(array.reshape(-1))  # a view when contiguous
        self.out_dtype = {key: _float_dtype(self.dtypes[key]) for key in self.keys}
        self.sizes = {key: math.prod(self.shapes[key]) for key in self.keys}

    def _from_deltas(self, deltas: ClientDeltas) -> None:
        """Stream w_i - w_t from the weights themselves (already validated by ClientDeltas)."""
        self.keys = tuple(deltas.global_params)
        self.shapes = {key: value.shape for key, value in deltas.global_params.items()}
        self.sizes = {key: value.size for key, value in deltas.global_params.items()}
        self.reference = {key: value.reshape(-1) for key, value in deltas.global_params.items()}
        self.flat = {key: [np.asarray(deltas.client_params[cid][key]).reshape(-1) for cid in self.ids]
                     for key in self.keys}
        self.out_dtype = {key: _float_dtype([self.reference[key].dtype] + [a.dtype for a in self.flat[key]])
                          for key in self.keys}

    @property
    def n(self) -> int:
        return len(self.ids)

    def blocks(self, native: bool = False,
               subtract: bool = True) -> Iterator[tuple[str, int, int, np.ndarray]]:
        """Yield (key, start, stop, block); block is a reused (n, stop-start) buffer.

        The buffer is float64, or with ``native`` the key's output dtype (enough for order
        statistics, which need no arithmetic). With a ClientDeltas source the reference weights
        are subtracted unless ``subtract`` is False: then the block holds the weights ``w_i`` and
        the caller subtracts ``w_t`` from its (c,) result (see ``shift``). Finiteness is checked
        by the callers on cheap derived values (see ``check``).
        """
        buffers: dict[np.dtype, np.ndarray] = {}
        for key in self.keys:
            arrays = self.flat[key]
            dtype = self.out_dtype[key] if native else np.dtype(np.float64)
            if dtype not in buffers:
                buffers[dtype] = np.empty((self.n, BLOCK_COLUMNS), dtype=dtype)
            for start in range(0, self.sizes[key], BLOCK_COLUMNS):
                stop = min(start + BLOCK_COLUMNS, self.sizes[key])
                block = buffers[dtype][:, : stop - start]
                for row, array in enumerate(arrays):
                    block[row] = array[start:stop]
                if subtract and self.reference is not None:
                    block -= self.reference[key][start:stop]  # (c,) broadcast over clients
                yield key, start, stop, block

    def shift(self, key: str, start: int, stop: int) -> np.ndarray | float:
        """The reference weights w_t of a block's columns, (c,), or 0.0 without a reference."""
        return 0.0 if self.reference is None else self.reference[key][start:stop]

    def check(self, finite: bool, key: str, block: np.ndarray) -> None:
        """Raise naming the client if ``finite`` is False (a value derived from ``block`` is not)."""
        if finite or not self.check_finite:
            return
        bad_rows = np.flatnonzero(~np.isfinite(block).all(axis=1))
        if bad_rows.size:
            raise ValueError(f"client {self.ids[bad_rows[0]]!r}: key {key!r} has non-finite values")
        if self.reference is not None and not np.isfinite(self.reference[key]).all():
            raise ValueError(f"global weights: key {key!r} has non-finite values")
        raise ValueError(f"key {key!r}: the aggregate overflowed")

    def empty_output(self) -> dict[str, np.ndarray]:
        return {key: np.empty(self.sizes[key], dtype=self.out_dtype[key]) for key in self.keys}

    def shaped(self, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {key: flat[key].reshape(self.shapes[key]) for key in self.keys}


def _float_dtype(dtypes: list[np.dtype]) -> np.dtype:
    """Common floating dtype of one key's arrays (integers promote to float64)."""
    common = np.result_type(*dtypes)
    return common if np.issubdtype(common, np.floating) else np.dtype(np.float64)


def _counts(ids: tuple[ClientId, ...], num_examples: Mapping[ClientId, float]) -> np.ndarray:
    """Example counts in ``ids`` order, validated: each finite and > 0."""
    counts = np.empty(len(ids), dtype=np.float64)
    for row, cid in enumerate(ids):
        if cid not in num_examples:
            raise ValueError(f"client {cid!r}: no entry in num_examples")
        value = num_examples[cid]
        try:
            counts[row] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"client {cid!r}: num_examples must be a number, got {value!r}") from None
        if not (math.isfinite(counts[row]) and counts[row] > 0):
            raise ValueError(f"client {cid!r}: num_examples must be finite and > 0, got {value!r}")
    return counts


def _combine(stack: _Stack, coefficients: np.ndarray) -> dict[str, np.ndarray]:
    """sum_i coefficients[i] * update_i, key by key; coefficients is (n,).

    From weights: sum_i c_i (w_i - w_t) = sum_i c_i w_i - (sum_i c_i) w_t, which saves a pass.
    A non-finite input makes the sum non-finite (0 * inf is nan), so checking the (c,) result
    is enough. einsum rather than BLAS gemv: memory-bound either way, and threaded gemv on a
    (20, c) block stalls badly when the cores are shared.
    """
    out = stack.empty_output()
    total = float(coefficients.sum())
    for key, start, stop, block in stack.blocks(subtract=False):
        combined = np.einsum("i,ij->j", coefficients, block)
        combined -= total * stack.shift(key, start, stop)
        stack.check(bool(np.isfinite(combined).all()), key, block)
        out[key][start:stop] = combined
    return stack.shaped(out)


def _reduce_sorted(stack: _Stack,
                   reducer: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
    """Coordinate-wise order statistic: reducer maps (c, n) columns, each sorted, to (c,).

    Sorting contiguous rows of n values is several times faster than ``np.partition`` or
    ``np.median`` along the client axis of an (n, c) block. Order statistics commute with the
    shift by w_t, so they are taken on the weights and w_t is subtracted from the result. NaN
    sorts last and -inf first, so the first and last sorted values reveal any non-finite input.
    """
    out = stack.empty_output()
    for key, start, stop, block in stack.blocks(native=True, subtract=False):
        columns = np.ascontiguousarray(block.T)  # (c, n)
        columns.sort(axis=1)
        stack.check(bool(np.isfinite(columns[:, 0]).all() and np.isfinite(columns[:, -1]).all()),
                    key, block)
        out[key][start:stop] = reducer(columns) - stack.shift(key, start, stop)
    return stack.shaped(out)


def _squared_norms(stack: _Stack) -> np.ndarray:
    """Squared global L2 norm of each client's flattened update, (n,)."""
    total = np.zeros(stack.n)
    for key, _start, _stop, block in stack.blocks():
        squares = np.einsum("ij,ij->i", block, block)
        stack.check(bool(np.isfinite(squares).all()), key, block)
        total += squares
    return total


def _gram(stack: _Stack) -> np.ndarray:
    """Gram matrix U U^T of the flattened updates, (n, n) float64.

    Accumulated in float64, the cancellation in ||a||^2 + ||b||^2 - 2 a.b costs about
    1e-16 ||a||^2, far below what separates two different updates, so no centering is needed.
    """
    gram = np.zeros((stack.n, stack.n))
    for key, _start, _stop, block in stack.blocks():
        product = np.dot(block, block.T)  # BLAS syrk for X X^T
        stack.check(bool(np.isfinite(np.diag(product)).all()), key, block)
        gram += product
    return (gram + gram.T) / 2.0


def _squared_distances(gram: np.ndarray) -> np.ndarray:
    """Pairwise squared Euclidean distances from a Gram matrix, (n, n), zero diagonal."""
    diagonal = np.diag(gram)
    distances = diagonal[:, None] + diagonal[None, :] - 2.0 * gram
    np.maximum(distances, 0.0, out=distances)  # rounding can leave tiny negatives
    np.fill_diagonal(distances, 0.0)
    return distances


def _cosine_distances(gram: np.ndarray) -> np.ndarray:
    """Pairwise cosine distances 1 - cos(u_i, u_j) from a Gram matrix, (n, n) in [0, 2].

    A zero update has no direction: its cosine similarity to every other update is taken as 0.
    """
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    scale = np.outer(norms, norms)
    similarity = np.divide(gram, scale, out=np.zeros_like(gram), where=scale > 0)
    distances = np.clip(1.0 - similarity, 0.0, 2.0)
    np.fill_diagonal(distances, 0.0)
    return distances


def _result(stack: _Stack, update: dict[str, np.ndarray], kept_rows: np.ndarray | None,
            details: dict[str, Any]) -> AggregationResult:
    if kept_rows is None:
        return AggregationResult(update, stack.ids, (), False, details)
    mask = np.zeros(stack.n, dtype=bool)
    mask[kept_rows] = True
    kept = tuple(cid for cid, keep in zip(stack.ids, mask) if keep)
    rejected = tuple(cid for cid, keep in zip(stack.ids, mask) if not keep)
    return AggregationResult(update, kept, rejected, True, details)


def _by_client(stack: _Stack, values: np.ndarray) -> dict[ClientId, float]:
    return {cid: float(value) for cid, value in zip(stack.ids, values)}


# --------------------------------------------------------------------------------------------
# The rules. Each ``_run_*`` returns an AggregationResult; the public function returns its update.


def _run_fedavg(updates: Updates, num_examples: Mapping[ClientId, float], *,
                check_finite: bool = True) -> AggregationResult:
    stack = _Stack(updates, num_examples, check_finite)
    weights = stack.counts / stack.counts.sum()
    return _result(stack, _combine(stack, weights), None, {"weights": _by_client(stack, weights)})


def _run_norm_bounded_fedavg(updates: Updates, num_examples: Mapping[ClientId, float], *,
                             bound: float | str = "median",
                             check_finite: bool = True) -> AggregationResult:
    stack = _Stack(updates, num_examples, check_finite)
    norms = np.sqrt(_squared_norms(stack))
    if isinstance(bound, str):
        if bound != "median":
            raise ValueError(f"bound must be a positive number or 'median', got {bound!r}")
        limit = float(np.median(norms))
    else:
        limit = float(bound)
        if not (math.isfinite(limit) and limit > 0):
            raise ValueError(f"bound must be a positive finite number or 'median', got {bound!r}")
    factors = _clip_factors(norms, limit)
    weights = stack.counts / stack.counts.sum()
    update = _combine(stack, weights * factors)
    details = {"bound": limit, "norms": _by_client(stack, norms),
               "factors": _by_client(stack, factors)}
    return _result(stack, update, None, details)


def _clip_factors(norms: np.ndarray, limit: float) -> np.ndarray:
    """min(1, limit / ||u_i||); a zero update keeps factor 1."""
    return np.divide(limit, norms, out=np.ones_like(norms), where=norms > limit)


def _run_coordinate_median(updates: Updates, num_examples: Mapping[ClientId, float] | None = None,
                           *, check_finite: bool = True) -> AggregationResult:
    stack = _Stack(updates, None, check_finite)
    low, high = (stack.n - 1) // 2, stack.n // 2

    def reducer(columns: np.ndarray) -> np.ndarray:
        # numpy convention: mean of the two middle values for an even number of clients
        return (columns[:, low].astype(np.float64) + columns[:, high]) / 2.0

    return _result(stack, _reduce_sorted(stack, reducer), None, {})


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


def _run_trimmed_mean(updates: Updates, num_examples: Mapping[ClientId, float] | None = None, *,
                      trim_fraction: float, check_finite: bool = True) -> AggregationResult:
    stack = _Stack(updates, None, check_finite)
    cut = trimmed_count(trim_fraction, stack.n)
    n = stack.n

    def reducer(columns: np.ndarray) -> np.ndarray:
        return columns[:, cut: n - cut].mean(axis=1, dtype=np.float64)

    return _result(stack, _reduce_sorted(stack, reducer), None, {"trimmed_per_side": cut})


def _run_multi_krum(updates: Updates, num_examples: Mapping[ClientId, float], *, f: int, m: int,
                    weighted: bool = False, check_finite: bool = True) -> AggregationResult:
    f, m = _non_negative_int("f", f), _non_negative_int("m", m)
    if m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    stack = _Stack(updates, num_examples, check_finite)
    n = stack.n
    distances = _squared_distances(_gram(stack))
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
        coefficients[selected] = stack.counts[selected] / stack.counts[selected].sum()
    else:
        coefficients[selected] = 1.0 / len(selected)
    details = {"scores": _by_client(stack, scores), "neighbours": neighbours,
               "f": f, "m": min(m, n), "weighted": weighted}
    return _result(stack, _combine(stack, coefficients), selected, details)


def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _run_flame(updates: Updates, num_examples: Mapping[ClientId, float], *,
               random_state: Any = None, noise_scale: float = 1e-3, min_samples: int = 1,
               weighted: bool = False, check_finite: bool = True) -> AggregationResult:
    if not (math.isfinite(noise_scale) and noise_scale >= 0):
        raise ValueError(f"noise_scale must be finite and >= 0, got {noise_scale!r}")
    stack = _Stack(updates, num_examples, check_finite)
    n = stack.n
    gram = _gram(stack)
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    labels = _flame_labels(_cosine_distances(gram), min_samples)
    kept_rows = _largest_cluster(labels)
    median_norm = float(np.median(norms))
    factors = _clip_factors(norms, median_norm)
    coefficients = np.zeros(n)
    if weighted:
        share = stack.counts[kept_rows] / stack.counts[kept_rows].sum()
    else:
        share = np.full(len(kept_rows), 1.0 / len(kept_rows))
    coefficients[kept_rows] = share * factors[kept_rows]
    update = _combine(stack, coefficients)
    sigma = noise_scale * median_norm
    if sigma > 0:
        generator = np.random.default_rng(random_state)
        for key in stack.keys:
            noise_dtype = update[key].dtype if update[key].dtype in (np.float32, np.float64) else np.float64
            noise = generator.standard_normal(update[key].shape, dtype=noise_dtype)
            update[key] += (sigma * noise).astype(update[key].dtype, copy=False)
    details = {"labels": {cid: int(label) for cid, label in zip(stack.ids, labels)},
               "median_norm": median_norm, "noise_sigma": sigma,
               "norms": _by_client(stack, norms), "factors": _by_client(stack, factors),
               "min_cluster_size": n // 2 + 1}
    return _result(stack, update, kept_rows, details)


def _flame_labels(distances: np.ndarray, min_samples: int) -> np.ndarray:
    """HDBSCAN labels on precomputed cosine distances; -1 marks noise. (n,) int."""
    n = len(distances)
    if n < 3:
        # HDBSCAN needs clusters of at least 2 and a majority of n // 2 + 1: one cluster of all
        return np.zeros(n, dtype=int)
    from sklearn.cluster import HDBSCAN

    clusterer = HDBSCAN(min_cluster_size=n // 2 + 1, min_samples=min_samples,
                        metric="precomputed", allow_single_cluster=True, copy=True)
    return clusterer.fit(distances).labels_


def _largest_cluster(labels: np.ndarray) -> np.ndarray:
    """Rows of the largest cluster (ties: smallest label); every row if all are noise."""
    clustered = labels[labels >= 0]
    if clustered.size == 0:
        return np.arange(len(labels))
    values, sizes = np.unique(clustered, return_counts=True)
    return np.flatnonzero(labels == values[np.argmax(sizes)])


# --------------------------------------------------------------------------------------------
# Public rule functions (the ``rule=`` signature).


def fedavg(updates: Updates, num_examples: Mapping[ClientId, float], *,
           check_finite: bool = True) -> dict[str, np.ndarray]:
    """Sample-weighted mean of client updates (FedAvg, McMahan et al. 2017).

    Parameters
    ----------
    updates : mapping of ClientId to mapping of str to ndarray
        Each client's update ``w_i - w_t``; all clients have the same keys and shapes.
    num_examples : mapping of ClientId to float
        Example count ``n_i`` of every client in ``updates`` (finite, > 0); extra ids are ignored.
    check_finite : bool, default True
        Raise ``ValueError`` naming the client and key if an update holds NaN or inf.

    Returns
    -------
    dict of str to ndarray
        ``sum_i n_i u_i / sum_i n_i``, keys in the first client's order, floating dtype of the inputs.

    Examples
    --------
    >>> import numpy as np
    >>> updates = {"a": {"w": np.array([1.0, 0.0])}, "b": {"w": np.array([4.0, 3.0])}}
    >>> fedavg(updates, {"a": 2, "b": 1})["w"]
    array([2., 1.])
    """
    return _run_fedavg(updates, num_examples, check_finite=check_finite).update


def norm_bounded_fedavg(updates: Updates, num_examples: Mapping[ClientId, float], *,
                        bound: float | str = "median",
                        check_finite: bool = True) -> dict[str, np.ndarray]:
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
    dict of str to ndarray
        The aggregated update.

    Examples
    --------
    >>> import numpy as np
    >>> updates = {"a": {"w": np.array([3.0, 4.0])}, "b": {"w": np.array([0.0, 1.0])}}
    >>> norm_bounded_fedavg(updates, {"a": 1, "b": 1}, bound=1.0)["w"]
    array([0.3, 0.9])
    """
    return _run_norm_bounded_fedavg(updates, num_examples, bound=bound,
                                    check_finite=check_finite).update


def coordinate_median(updates: Updates, num_examples: Mapping[ClientId, float] | None = None, *,
                      check_finite: bool = True) -> dict[str, np.ndarray]:
    """Coordinate-wise median of updates (Yin et al. 2018).

    Example counts are accepted for the common signature and ignored. With an even number of
    clients a coordinate's median is the mean of its two middle values (``numpy.median``).

    Examples
    --------
    >>> import numpy as np
    >>> updates = {i: {"w": np.array([v, -v])} for i, v in enumerate([1.0, 5.0, 2.0, 100.0])}
    >>> coordinate_median(updates, None)["w"]
    array([ 3.5, -3.5])
    """
    return _run_coordinate_median(updates, num_examples, check_finite=check_finite).update


def trimmed_mean(updates: Updates, num_examples: Mapping[ClientId, float] | None = None, *,
                 trim_fraction: float, check_finite: bool = True) -> dict[str, np.ndarray]:
    """Coordinate-wise trimmed mean (Yin et al. 2018).

    For every coordinate, the ``k = floor(trim_fraction * n)`` largest and ``k`` smallest client
    values are dropped and the remaining ``n - 2k`` are averaged without weights (see
    :func:`trimmed_count`; the same rounding as ``scipy.stats.trim_mean``). The paper sets
    ``trim_fraction`` to the population malicious fraction (``tab:app_robust_agg_params``): 0.4
    with 20 clients trims 8 per side and averages the middle 4.

    Parameters
    ----------
    trim_fraction : float
        Fraction trimmed from each side, in [0, 0.5). 0 gives the plain (unweighted) mean.

    Examples
    --------
    >>> import numpy as np
    >>> updates = {i: {"w": np.array([v])} for i, v in enumerate([-50.0, 1.0, 2.0, 3.0, 90.0])}
    >>> trimmed_mean(updates, None, trim_fraction=0.2)["w"]
    array([2.])
    """
    return _run_trimmed_mean(updates, num_examples, trim_fraction=trim_fraction,
                             check_finite=check_finite).update


def multi_krum(updates: Updates, num_examples: Mapping[ClientId, float], *, f: int, m: int,
               weighted: bool = False, check_finite: bool = True) -> dict[str, np.ndarray]:
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

    Examples
    --------
    >>> import numpy as np
    >>> updates = {i: {"w": np.array([v])} for i, v in enumerate([0.0, 1.0, 2.0, 30.0])}
    >>> multi_krum(updates, {i: 1 for i in range(4)}, f=1, m=3)["w"]
    array([1.])
    """
    return _run_multi_krum(updates, num_examples, f=f, m=m, weighted=weighted,
                           check_finite=check_finite).update


def flame(updates: Updates, num_examples: Mapping[ClientId, float], *, random_state: Any = None,
          noise_scale: float = 1e-3, min_samples: int = 1, weighted: bool = False,
          check_finite: bool = True) -> dict[str, np.ndarray]:
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

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> base = rng.normal(size=50)
    >>> updates = {i: {"w": base + 0.1 * rng.normal(size=50)} for i in range(6)}
    >>> updates[6] = {"w": -base}
    >>> update = flame(updates, {i: 1 for i in range(7)}, random_state=0)
    >>> float(np.corrcoef(update["w"], base)[0, 1]) > 0.99
    True
    """
    return _run_flame(updates, num_examples, random_state=random_state, noise_scale=noise_scale,
                      min_samples=min_samples, weighted=weighted, check_finite=check_finite).update


# --------------------------------------------------------------------------------------------
# Registry, paper parameters and helpers.

_RUNNERS: dict[str, Callable[..., AggregationResult]] = {
    "fedavg": _run_fedavg,
    "norm_bounded_fedavg": _run_norm_bounded_fedavg,
    "coordinate_median": _run_coordinate_median,
    "trimmed_mean": _run_trimmed_mean,
    "multi_krum": _run_multi_krum,
    "flame": _run_flame,
}
AGGREGATOR_NAMES: tuple[str, ...] = tuple(_RUNNERS)


@dataclass(frozen=True)
class Aggregator:
    """A named rule with its parameters bound; made by :func:`make_aggregator`.

    Calling it has the ``rule`` signature (returns the update dict), so it can be passed to
    ``ScreeningResult.aggregate(..., rule=aggregator)``; :meth:`run` also reports kept clients.
    """

    name: str
    params: dict[str, Any]

    def __call__(self, updates: Updates,
                 num_examples: Mapping[ClientId, float]) -> dict[str, np.ndarray]:
        return self.run(updates, num_examples).update

    def run(self, updates: Updates, num_examples: Mapping[ClientId, float]) -> AggregationResult:
        """Aggregate and report which clients were kept."""
        return _RUNNERS[self.name](updates, num_examples, **self.params)


def make_aggregator(name: str, **params: Any) -> Aggregator:
    """Bind a rule's parameters; unknown names or parameters raise with the allowed ones.

    Parameters
    ----------
    name : str
        One of :data:`AGGREGATOR_NAMES`.
    **params
        The rule's keyword parameters (e.g. ``trim_fraction``, ``f``, ``m``, ``bound``,
        ``random_state``). Required ones are checked here.

    Examples
    --------
    >>> agg = make_aggregator("multi_krum", **paper_parameters(0.4)["multi_krum"])
    >>> agg.params
    {'f': 8, 'm': 12}
    """
    if name not in _RUNNERS:
        raise ValueError(f"unknown aggregator {name!r}; choose one of {list(AGGREGATOR_NAMES)}")
    signature = inspect.signature(_RUNNERS[name])
    allowed = [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise TypeError(f"aggregator {name!r}: unknown parameters {unknown}; allowed {allowed}")
    required = [p.name for p in signature.parameters.values()
                if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    missing = [p for p in required if p not in params]
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
    clients_per_round = _non_negative_int("clients_per_round", clients_per_round)
    if clients_per_round < 1:
        raise ValueError("clients_per_round must be at least 1")
    f = int(math.floor(malicious_fraction * clients_per_round + 0.5 + 1e-9))
    return {"trimmed_mean": {"trim_fraction": float(malicious_fraction)},
            "multi_krum": {"f": f, "m": clients_per_round - f}}


class ClientDeltas(Mapping):
    """The updates ``w_i - w_t`` of a round, computed when read: a read-only mapping.

    The rules of this module recognise it and subtract inside their column blocks, so the
    ``(n_clients, n_parameters)`` updates are never materialised (at the paper's GPT size that
    saves 1.8 GB and most of FedAvg's time). Any other reader, e.g. ``updates[cid]``, gets a new
    dict of new arrays for that client. Holds references to the arrays it was given: do not
    modify them while the view is in use. Keys are the global model's keys; extra client keys
    are ignored.

    Parameters
    ----------
    global_params : mapping of str to ndarray
        The global weights ``w_t``.
    client_params : mapping of ClientId to mapping of str to ndarray
        The returned local weights ``w_i``.

    Raises
    ------
    ValueError
        Naming the client and key when a key is missing, a shape differs or a dtype is not real.

    Examples
    --------
    >>> import numpy as np
    >>> deltas = ClientDeltas({"w": np.ones(2)}, {"a": {"w": np.array([2.0, 3.0])}})
    >>> deltas["a"]["w"], len(deltas)
    (array([1., 2.]), 1)
    """

    def __init__(self, global_params: ParamDict, client_params: Mapping[ClientId, ParamDict]) -> None:
        if not isinstance(global_params, Mapping) or not isinstance(client_params, Mapping):
            raise ValueError("global_params and client_params must be mappings")
        self.global_params = {key: _real_array(value, "global weights", key)
                              for key, value in global_params.items()}
        self.client_params = dict(client_params)
        for cid, params in self.client_params.items():
            if not isinstance(params, Mapping):
                raise ValueError(f"client {cid!r}: weights must be a mapping of named arrays, "
                                 f"got {type(params).__name__}")
            for key, reference in self.global_params.items():
                if key not in params:
                    raise ValueError(f"client {cid!r}: key {key!r} missing")
                local = _real_array(params[key], f"client {cid!r}", key)
                if local.shape != reference.shape:
                    raise ValueError(f"client {cid!r}: key {key!r} has shape {local.shape}, "
                                     f"expected {reference.shape}")

    def __getitem__(self, cid: ClientId) -> dict[str, np.ndarray]:
        params = self.client_params[cid]
        return {key: np.subtract(params[key], reference) for key, reference in self.global_params.items()}

    def __iter__(self) -> Iterator[ClientId]:
        return iter(self.client_params)

    def __len__(self) -> int:
        return len(self.client_params)


def _real_array(value: Any, owner: str, key: str) -> np.ndarray:
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{owner}: key {key!r} has dtype {array.dtype}, expected a real number type")
    return array


def client_updates(global_params: ParamDict, client_params: Mapping[ClientId, ParamDict]) -> ClientDeltas:
    """The round's updates ``w_i - w_t`` as a :class:`ClientDeltas` view (computed when read).

    Pass the result straight to a rule of this module: it streams the subtraction and never
    materialises the updates. ``ValueError`` names the client and key for a missing key or a
    shape mismatch.
    """
    return ClientDeltas(global_params, client_params)


def apply_update(global_params: ParamDict, update: ParamDict) -> dict[str, np.ndarray]:
    """New global weights ``w_t + update``, in the global weights' dtypes (new arrays)."""
    out = {}
    for key, reference in global_params.items():
        reference = np.asarray(reference)
        out[key] = (reference + update[key]).astype(reference.dtype, copy=False)
    return out
