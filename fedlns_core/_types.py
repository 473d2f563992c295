"""Type aliases and the boundary checks shared by the public functions."""

from __future__ import annotations

import numbers
from typing import Mapping, Union

import numpy as np

ClientId = Union[str, int]
ParamDict = Mapping[str, np.ndarray]


def check_client_id(client_id) -> ClientId:
    """Return ``client_id`` as a plain ``str`` or ``int``; raise ``TypeError`` otherwise."""
    if isinstance(client_id, (bool, np.bool_)):
        raise TypeError(f"client id {client_id!r}: bool is not a supported id type (use str or int)")
    if isinstance(client_id, str):
        return client_id
    if isinstance(client_id, numbers.Integral):
        return int(client_id)
    raise TypeError(
        f"client id {client_id!r} has unsupported type {type(client_id).__name__}; use str or int"
    )


def id_sort_key(client_id: ClientId):
    """Total order over mixed str/int ids, used to make decisions independent of input order."""
    return (1, client_id) if isinstance(client_id, str) else (0, client_id)


def check_global_params(global_params) -> dict[str, np.ndarray]:
    """Validate the global model: a mapping of str to finite numeric arrays."""
    if not isinstance(global_params, Mapping):
        raise TypeError(f"global_params must be a mapping of str to arrays, got {type(global_params).__name__}")
    if not global_params:
        raise ValueError("global_params is empty")
    checked = {}
    for key, value in global_params.items():
        if not isinstance(key, str):
            raise TypeError(f"global_params: key {key!r} is not a str")
        array = np.asarray(value)
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise TypeError(f"global_params: key {key!r} has non-numeric dtype {array.dtype}")
        if not all_finite(array):
            raise ValueError(f"global_params: key {key!r} has non-finite values (NaN or Inf)")
        checked[key] = array
    return checked


def all_finite(array: np.ndarray) -> bool:
    """True when every value is finite, reading a large array once and allocating nothing."""
    if array.dtype.kind not in "fc":
        return True
    if array.size <= 65536:
        return bool(np.isfinite(array).all())
    flat = array.reshape(-1)
    # A dot product (BLAS, about twice as fast as np.sum here) or a sum is NaN/Inf when any value is,
    # or when it overflows; only then pay for the exact elementwise check.
    with np.errstate(over="ignore", invalid="ignore"):
        if flat.dtype in (np.float32, np.float64) and flat.flags.c_contiguous:
            probe = np.dot(flat, flat)
        else:
            probe = np.sum(flat)
    if np.isfinite(probe):
        return True
    return bool(np.isfinite(array).all())


def client_problem(client_params, global_params: Mapping[str, np.ndarray]) -> str | None:
    """Why a client's parameters cannot be used, or ``None`` when they can."""
    if not isinstance(client_params, Mapping):
        return f"parameters must be a mapping of str to arrays, got {type(client_params).__name__}"
    missing = [key for key in global_params if key not in client_params]
    if missing:
        return f"missing key{'s' if len(missing) > 1 else ''} {_listed(missing)}"
    extra = [key for key in client_params if key not in global_params]
    if extra:
        return f"unexpected key{'s' if len(extra) > 1 else ''} {_listed(extra)}"
    for key, reference in global_params.items():
        array = np.asarray(client_params[key])
        if array.shape != reference.shape:
            return f"key {key!r} has shape {array.shape}, expected {reference.shape}"
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            return f"key {key!r} has non-numeric dtype {array.dtype}"
        if not all_finite(array):
            return f"non-finite values in {key!r}"
    return None


def count_problem(count) -> str | None:
    """Why an example count is unusable (eq. weight needs n > 0), or ``None``."""
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Real):
        return f"num_examples must be a positive number, got {count!r}"
    if not np.isfinite(count):
        return f"num_examples is not finite ({count!r})"
    if count <= 0:
        return f"num_examples must be positive, got {count!r}"
    return None


def _listed(keys, limit: int = 3) -> str:
    shown = ", ".join(repr(key) for key in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
