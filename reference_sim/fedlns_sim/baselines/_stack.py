"""The stacked-update view every baseline works on, and what a rule returns.

A round's updates form an ``(n_clients, n_parameters)`` matrix, but it is never stacked: a
:class:`Stack` validates the updates once and streams column blocks of it, ``(n_clients, block)``
float64 at a time, so the extra memory is a few MiB whatever the model size, and every sum is
taken in float64. Given a :class:`ClientDeltas` view (what :func:`client_updates` returns), the
subtraction ``w_i - w_t`` happens inside those blocks too, so a server step never materialises the
updates. The rules need four passes over the blocks, all here: a weighted sum of the updates
(:meth:`Stack.combine`), a coordinate-wise order statistic (:meth:`Stack.reduce_sorted`), the
squared norms (:meth:`Stack.squared_norms`) and the Gram matrix (:meth:`Stack.gram`, one BLAS
``syrk`` per block, from which pairwise distances follow without a loop over client pairs).
Outputs have the floating dtype of the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ClientId = Hashable  # the core uses ``str | int``; any hashable id works here
ParamDict = Mapping[str, np.ndarray]
Updates = Mapping[ClientId, ParamDict]

# Columns per streamed block: 20 clients x 65536 float64 = 10 MiB, large enough that the Python
# loop costs nothing next to the copying, small enough to stay near the cache.
BLOCK_COLUMNS = 1 << 16


@dataclass(frozen=True, eq=False)
class AggregationResult(Mapping):
    """What one aggregation rule did in one round; reads as the update itself.

    As a mapping it is the aggregated update (key -> array), so a rule's result can be passed
    wherever an update is expected, e.g. returned as FedLNS's ``rule=`` or given to
    ``fedlns_core.apply_update``.

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

    def __getitem__(self, key: str) -> np.ndarray:
        return self.update[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.update)

    def __len__(self) -> int:
        return len(self.update)


class ClientDeltas(Mapping):
    """The updates ``w_i - w_t`` of a round, computed when read: a read-only mapping.

    The rules recognise it and subtract inside their column blocks, so the
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
    >>> deltas = ClientDeltas({"w": np.ones(2)}, {"a": {"w": np.array([2.0, 3.0])}})
    >>> deltas["a"]["w"], len(deltas)
    (array([1., 2.]), 1)
    """

    def __init__(self, global_params: ParamDict, client_params: Mapping[ClientId, ParamDict]) -> None:
        if not isinstance(global_params, Mapping) or not isinstance(client_params, Mapping):
            raise ValueError("global_params and client_params must be mappings")
        self.global_params = {key: _real_array(value, "global weights", key) for key, value in global_params.items()}
        self.client_params = dict(client_params)
        for cid, params in self.client_params.items():
            if not isinstance(params, Mapping):
                raise ValueError(
                    f"client {cid!r}: weights must be a mapping of named arrays, got {type(params).__name__}"
                )
            for key, reference in self.global_params.items():
                if key not in params:
                    raise ValueError(f"client {cid!r}: key {key!r} missing")
                local = _real_array(params[key], f"client {cid!r}", key)
                if local.shape != reference.shape:
                    raise ValueError(f"client {cid!r}: key {key!r} has shape {local.shape}, expected {reference.shape}")

    def __getitem__(self, cid: ClientId) -> dict[str, np.ndarray]:
        params = self.client_params[cid]
        return {key: np.subtract(params[key], reference) for key, reference in self.global_params.items()}

    def __iter__(self) -> Iterator[ClientId]:
        return iter(self.client_params)

    def __len__(self) -> int:
        return len(self.client_params)


def client_updates(global_params: ParamDict, client_params: Mapping[ClientId, ParamDict]) -> ClientDeltas:
    """The round's updates ``w_i - w_t`` as a :class:`ClientDeltas` view (computed when read).

    Pass the result straight to a rule: it streams the subtraction and never materialises the
    updates. ``ValueError`` names the client and key for a missing key or a shape mismatch.
    """
    return ClientDeltas(global_params, client_params)


class Stack:
    """Validated updates of n clients, streamed as (n_clients, block) float64 column blocks.

    Parameters
    ----------
    updates : mapping of ClientId to mapping of str to ndarray, or ClientDeltas
        Each client's update; all clients have the same keys and shapes (``ValueError`` naming
        the client and key otherwise).
    num_examples : mapping of ClientId to float, or None
        Example counts (finite, > 0), kept as :attr:`counts` in client order; None for rules that
        ignore them.
    check_finite : bool
        Raise ``ValueError`` naming the client and key when an update holds NaN or inf.
    """

    def __init__(self, updates: Updates, num_examples: Mapping[ClientId, float] | None, check_finite: bool) -> None:
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
        self.shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, list[np.dtype]] = {}
        self.flat: dict[str, list[np.ndarray]] = {key: [] for key in self.keys}
        key_set = set(self.keys)
        for cid in self.ids:
            update = updates[cid]
            if not isinstance(update, Mapping):
                raise ValueError(
                    f"client {cid!r}: update must be a mapping of named arrays, got {type(update).__name__}"
                )
            if set(update) != key_set:
                missing = sorted(key_set - set(update))
                extra = sorted(set(update) - key_set)
                raise ValueError(
                    f"client {cid!r}: keys differ from client {first_id!r} (missing {missing}, extra {extra})"
                )
            for key in self.keys:
                array = _real_array(update[key], f"client {cid!r}", key)
                expected = self.shapes.setdefault(key, array.shape)
                if array.shape != expected:
                    raise ValueError(f"client {cid!r}: key {key!r} has shape {array.shape}, expected {expected}")
                dtypes.setdefault(key, []).append(array.dtype)
                self.flat[key].append(array.reshape(-1))  # a view when contiguous
        self.out_dtype = {key: _float_dtype(dtypes[key]) for key in self.keys}
        self.sizes = {key: math.prod(self.shapes[key]) for key in self.keys}

    def _from_deltas(self, deltas: ClientDeltas) -> None:
        """Stream w_i - w_t from the weights themselves (already validated by ClientDeltas)."""
        self.keys = tuple(deltas.global_params)
        self.shapes = {key: value.shape for key, value in deltas.global_params.items()}
        self.sizes = {key: value.size for key, value in deltas.global_params.items()}
        self.reference = {key: value.reshape(-1) for key, value in deltas.global_params.items()}
        self.flat = {
            key: [np.asarray(deltas.client_params[cid][key]).reshape(-1) for cid in self.ids] for key in self.keys
        }
        self.out_dtype = {
            key: _float_dtype([self.reference[key].dtype] + [a.dtype for a in self.flat[key]]) for key in self.keys
        }

    @property
    def n(self) -> int:
        """Number of clients."""
        return len(self.ids)

    # ---------------------------------------------------------------------------- streaming

    def blocks(self, native: bool = False, subtract: bool = True) -> Iterator[tuple[str, int, int, np.ndarray]]:
        """Yield (key, start, stop, block); block is a reused (n, stop-start) buffer.

        The buffer is float64, or with ``native`` the key's output dtype (enough for order
        statistics, which need no arithmetic). With a ClientDeltas source the reference weights
        are subtracted unless ``subtract`` is False: then the block holds the weights ``w_i`` and
        the caller subtracts ``w_t`` from its (c,) result (see :meth:`shift`). Finiteness is
        checked by the callers on cheap derived values (see :meth:`check`).
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

    def _empty_output(self) -> dict[str, np.ndarray]:
        return {key: np.empty(self.sizes[key], dtype=self.out_dtype[key]) for key in self.keys}

    def _shaped(self, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {key: flat[key].reshape(self.shapes[key]) for key in self.keys}

    # ---------------------------------------------------------------------------- the four passes

    def combine(self, coefficients: np.ndarray) -> dict[str, np.ndarray]:
        """``sum_i coefficients[i] * update_i``, key by key; coefficients is (n,).

        From weights: sum_i c_i (w_i - w_t) = sum_i c_i w_i - (sum_i c_i) w_t, which saves a
        pass. A non-finite input makes the sum non-finite (0 * inf is nan), so checking the (c,)
        result is enough. einsum rather than BLAS gemv: memory-bound either way, and threaded gemv
        on a (20, c) block stalls badly when the cores are shared.
        """
        out = self._empty_output()
        total = float(coefficients.sum())
        for key, start, stop, block in self.blocks(subtract=False):
            combined = np.einsum("i,ij->j", coefficients, block)
            combined -= total * self.shift(key, start, stop)
            self.check(bool(np.isfinite(combined).all()), key, block)
            out[key][start:stop] = combined
        return self._shaped(out)

    def reduce_sorted(self, reducer: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
        """Coordinate-wise order statistic: reducer maps (c, n) columns, each sorted, to (c,).

        Sorting contiguous rows of n values is several times faster than ``np.partition`` or
        ``np.median`` along the client axis of an (n, c) block. Order statistics commute with the
        shift by w_t, so they are taken on the weights and w_t is subtracted from the result. NaN
        sorts last and -inf first, so the first and last sorted values reveal any non-finite input.
        """
        out = self._empty_output()
        for key, start, stop, block in self.blocks(native=True, subtract=False):
            columns = np.ascontiguousarray(block.T)  # (c, n)
            columns.sort(axis=1)
            self.check(bool(np.isfinite(columns[:, 0]).all() and np.isfinite(columns[:, -1]).all()), key, block)
            out[key][start:stop] = reducer(columns) - self.shift(key, start, stop)
        return self._shaped(out)

    def squared_norms(self) -> np.ndarray:
        """Squared global L2 norm of each client's flattened update, (n,)."""
        total = np.zeros(self.n)
        for key, _start, _stop, block in self.blocks():
            squares = np.einsum("ij,ij->i", block, block)
            self.check(bool(np.isfinite(squares).all()), key, block)
            total += squares
        return total

    def gram(self) -> np.ndarray:
        """Gram matrix U U^T of the flattened updates, (n, n) float64.

        Accumulated in float64, the cancellation in ||a||^2 + ||b||^2 - 2 a.b costs about
        1e-16 ||a||^2, far below what separates two different updates, so no centering is needed.
        """
        gram = np.zeros((self.n, self.n))
        for key, _start, _stop, block in self.blocks():
            product = np.dot(block, block.T)  # BLAS syrk for X X^T
            self.check(bool(np.isfinite(np.diag(product)).all()), key, block)
            gram += product
        return (gram + gram.T) / 2.0

    # ---------------------------------------------------------------------------- results

    def by_client(self, values: np.ndarray) -> dict[ClientId, float]:
        """Per-client values, (n,), as a dict of floats keyed by client id."""
        return {cid: float(value) for cid, value in zip(self.ids, values)}

    def result(
        self, update: dict[str, np.ndarray], kept_rows: np.ndarray | None = None, details: dict[str, Any] | None = None
    ) -> AggregationResult:
        """The rule's :class:`AggregationResult`; ``kept_rows`` None for rules that keep everyone."""
        details = details or {}
        if kept_rows is None:
            return AggregationResult(update, self.ids, (), False, details)
        mask = np.zeros(self.n, dtype=bool)
        mask[kept_rows] = True
        kept = tuple(cid for cid, keep in zip(self.ids, mask) if keep)
        rejected = tuple(cid for cid, keep in zip(self.ids, mask) if not keep)
        return AggregationResult(update, kept, rejected, True, details)


def clip_factors(norms: np.ndarray, limit: float) -> np.ndarray:
    """``min(1, limit / ||u_i||)``; a zero update keeps factor 1."""
    return np.divide(limit, norms, out=np.ones_like(norms), where=norms > limit)


def non_negative_int(name: str, value: Any) -> int:
    """``value`` as an int; ``ValueError`` naming ``name`` unless it is an integer >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


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


def _real_array(value: Any, owner: str, key: str) -> np.ndarray:
    """``value`` as an array; ``ValueError`` naming ``owner`` and ``key`` unless its dtype is real."""
    array = np.asarray(value)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{owner}: key {key!r} has dtype {array.dtype}, expected a real number type")
    return array
