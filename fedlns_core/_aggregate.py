"""Sample-weighted aggregation of client updates (eqs. weight, aggregation)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping

import numpy as np

from ._types import ClientId, ParamDict, check_client_id, check_global_params

#: ``aggregator(updates, num_examples) -> update``: combine retained updates into one update.
Aggregator = Callable[[Mapping[ClientId, ParamDict], Mapping[ClientId, float]], ParamDict]
AggregationRule = Aggregator  # its former name, kept for code that imports it


def normalized_weights(weights: Mapping[ClientId, float]) -> dict[ClientId, float]:
    """``alpha_i = n_i / sum_j n_j`` (eq. ``weight``); ``ValueError`` for a bad weight."""
    checked: dict[ClientId, float] = {}
    for client_id, weight in weights.items():
        client_id = check_client_id(client_id)  # noqa: PLW2901 - the id, checked and normalized
        if (
            isinstance(weight, (bool, np.bool_))
            or not isinstance(weight, numbers.Real)
            or not np.isfinite(weight)
            or weight <= 0
        ):
            raise ValueError(f"client {client_id!r}: weight must be a positive finite number, got {weight!r}")
        checked[client_id] = float(weight)
    if not checked:
        raise ValueError("weights is empty: nothing to average")
    total = sum(checked.values())
    return {client_id: weight / total for client_id, weight in checked.items()}


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    # float32 and wider keep their precision; halves and integers are combined in float32 at least.
    return np.result_type(dtype, np.float32) if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)


def _cast_like(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    if np.issubdtype(reference.dtype, np.inexact):
        return values.astype(reference.dtype, copy=False)
    if reference.dtype == np.bool_:
        return values >= 0.5
    return np.rint(values).astype(reference.dtype)


def weighted_average(
    global_params: ParamDict,
    client_params: Mapping[ClientId, ParamDict],
    weights: Mapping[ClientId, float],
    scales: Mapping[ClientId, float] | None = None,
) -> dict[str, np.ndarray]:
    """``w + sum_i alpha_i c_i (w_i - w)`` with ``alpha`` the normalised ``weights`` (eq. ``aggregation``).

    Parameters
    ----------
    global_params : mapping of str to ndarray
        The global model ``w_t``.
    client_params : mapping of client id to (mapping of str to ndarray)
        Returned local models; only the ids in ``weights`` are used.
    weights : mapping of client id to float
        Positive weights, e.g. example counts ``n_i``; normalised to sum to one.
    scales : mapping of client id to float, optional
        Factors ``c_i`` in [0, 1] applied to the updates after weighting (norm clipping); 1 where absent.

    Returns
    -------
    dict of str to ndarray
        New arrays; each has the dtype of the global parameter (integers are rounded).

    Examples
    --------
    >>> g = {"w": np.zeros(2)}
    >>> clients = {"a": {"w": np.array([1.0, 2.0])}, "b": {"w": np.array([4.0, 8.0])}}
    >>> weighted_average(g, clients, {"a": 2, "b": 1})
    {'w': array([2., 4.])}
    """
    global_params = check_global_params(global_params)
    alphas = normalized_weights(weights)
    if scales:
        alphas = {client_id: alpha * _scale(scales, client_id) for client_id, alpha in alphas.items()}
    for client_id in alphas:
        if client_id not in client_params:
            raise ValueError(f"client {client_id!r} has a weight but no parameters")
        missing = [key for key in global_params if key not in client_params[client_id]]
        if missing:
            raise ValueError(f"client {client_id!r}: missing key {missing[0]!r}")
    out = {}
    for key, reference in global_params.items():
        locals_ = []
        for client_id in alphas:
            local = np.asarray(client_params[client_id][key])
            if local.shape != reference.shape:
                raise ValueError(
                    f"client {client_id!r}: key {key!r} has shape {local.shape}, expected {reference.shape}"
                )
            locals_.append(local.reshape(-1))
        out[key] = _cast_like(
            _blocked_average(reference.reshape(-1), locals_, list(alphas.values()), _compute_dtype(reference.dtype)),
            reference,
        ).reshape(reference.shape)
    return out


_BLOCK = 1 << 16  # elements per block: the running total and scratch stay in cache across clients


def _blocked_average(
    reference: np.ndarray, locals_: list[np.ndarray], alphas: list[float], dtype: np.dtype
) -> np.ndarray:
    """``reference + sum_i alphas[i] * (locals_[i] - reference)`` over flat arrays, block by block."""
    total = np.empty(reference.size, dtype=dtype)
    scratch = np.empty(min(_BLOCK, reference.size), dtype=dtype)
    for start in range(0, reference.size, _BLOCK):
        stop = min(start + _BLOCK, reference.size)
        base, block, buffer = reference[start:stop], total[start:stop], scratch[: stop - start]
        block[...] = 0
        for local, alpha in zip(locals_, alphas):
            np.subtract(local[start:stop], base, out=buffer, dtype=dtype, casting="unsafe")
            buffer *= alpha
            block += buffer
        block += base
    return total


def _scale(scales: Mapping[ClientId, float], client_id: ClientId) -> float:
    scale = scales.get(client_id, 1.0)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real) or not 0 <= scale <= 1:
        raise ValueError(f"client {client_id!r}: scale must be a number in [0, 1], got {scale!r}")
    return float(scale)


def apply_aggregator(
    global_params: ParamDict,
    client_params: Mapping[ClientId, ParamDict],
    num_examples: Mapping[ClientId, float],
    aggregator: Aggregator,
    scales: Mapping[ClientId, float] | None = None,
) -> dict[str, np.ndarray]:
    """``w + aggregator(updates, num_examples)`` where ``updates[i] = c_i (w_i - w)``: compose another
    aggregator (``c_i`` from ``scales``, 1 where absent)."""
    updates: dict[ClientId, dict[str, np.ndarray]] = {}
    for client_id in num_examples:
        scale = _scale(scales or {}, client_id)
        updates[client_id] = {}
        for key, reference in global_params.items():
            update = np.subtract(client_params[client_id][key], reference, dtype=_compute_dtype(reference.dtype))
            if scale != 1.0:
                update *= scale
            updates[client_id][key] = update
    return _add_update(global_params, aggregator(updates, dict(num_examples)))


def apply_update(global_params: ParamDict, update: ParamDict) -> dict[str, np.ndarray]:
    """``w + u``: the next global model from one combined update ``u`` (what an aggregator returns).

    Parameters
    ----------
    global_params : mapping of str to ndarray
        The global model ``w_t``.
    update : mapping of str to ndarray
        The combined update, with exactly the global model's keys and shapes.

    Returns
    -------
    dict of str to ndarray
        New arrays, each with the dtype of the global parameter: the sum is taken in the global
        parameter's floating dtype (float32 at least) and integers are rounded.

    Examples
    --------
    >>> g = {"w": np.array([1.0, 2.0], np.float32)}
    >>> apply_update(g, {"w": np.array([0.5, -1.0])})
    {'w': array([1.5, 1. ], dtype=float32)}
    """
    return _add_update(check_global_params(global_params), update)


def _add_update(global_params: Mapping[str, np.ndarray], update: ParamDict) -> dict[str, np.ndarray]:
    """:func:`apply_update` on a global model already checked."""
    if not isinstance(update, Mapping) or set(update) != set(global_params):
        raise ValueError("the update must be a mapping with exactly the global model's keys")
    out = {}
    for key, reference in global_params.items():
        value = np.asarray(update[key])
        if value.shape != reference.shape:
            raise ValueError(f"the update has shape {value.shape} for {key!r}, expected {reference.shape}")
        out[key] = _cast_like(reference + value.astype(_compute_dtype(reference.dtype), copy=False), reference)
    return out
