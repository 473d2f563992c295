"""Type aliases and the boundary checks shared by the public functions.

Dtype policy: parameter arrays are real floating (float16/32/64) or integer. Complex, bool,
timedelta, datetime, string, object and structured arrays are refused, and so is anything numpy
cannot read as one rectangular array. Statistics (signatures, median/MAD, the mixture) are computed
in float64; the aggregate keeps each parameter in the global model's dtype, so a client value must
fit that dtype with room for the averaging arithmetic (half the largest finite float, or the integer
range).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping

import numpy as np

ClientId = str | int
ParamDict = Mapping[str, np.ndarray]

#: Largest accepted example count: float64 holds every integer up to 2**53 exactly, and no training
#: set is larger; sums of a round's counts stay far from overflow.
MAX_COUNT = float(2**53)
_SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)
_REAL_KINDS = "fiu"


def check_client_id(client_id) -> ClientId:
    """Return ``client_id`` as a plain ``str`` or ``int``; raise ``TypeError`` otherwise."""
    if isinstance(client_id, (bool, np.bool_)):
        raise TypeError(f"client id {client_id!r}: bool is not a supported id type (use str or int)")
    if isinstance(client_id, str):
        return client_id
    if isinstance(client_id, numbers.Integral):
        return int(client_id)
    raise TypeError(f"client id {client_id!r} has unsupported type {type(client_id).__name__}; use str or int")


def id_sort_key(client_id: ClientId):
    """Total order over mixed str/int ids, used to make decisions independent of input order."""
    return (1, client_id) if isinstance(client_id, str) else (0, client_id)


def check_global_params(global_params) -> dict[str, np.ndarray]:
    """Validate the global model: a mapping of str to finite real (floating or integer) arrays."""
    if not isinstance(global_params, Mapping):
        raise TypeError(f"global_params must be a mapping of str to arrays, got {type(global_params).__name__}")
    if not global_params:
        raise ValueError("global_params is empty")
    checked = {}
    for key, value in global_params.items():
        if not isinstance(key, str):
            raise TypeError(f"global_params: key {key!r} is not a str")
        array, problem = read_array(value)
        if array is None:  # then problem says why
            raise TypeError(f"global_params: key {key!r} {problem}")
        if array.dtype.kind not in _REAL_KINDS:
            raise TypeError(
                f"global_params: key {key!r} has unsupported dtype {array.dtype} (real floating or integer arrays only)"
            )
        if not all_finite(array):
            raise ValueError(f"global_params: key {key!r} has non-finite values (NaN or Inf)")
        checked[key] = array
    return checked


def read_array(value) -> tuple[np.ndarray | None, str | None]:
    """``(array, None)``, or ``(None, why)`` when ``value`` cannot be read as one rectangular array."""
    if isinstance(value, np.ndarray):
        return np.asarray(value), None
    try:
        return np.asarray(value), None
    except Exception as error:  # noqa: BLE001 - ragged lists, a raising __array__, ...: all client input
        return None, f"cannot be read as an array ({type(error).__name__}: {escape_text(str(error), 120)})"


def all_finite(array: np.ndarray) -> bool:
    """True when every value is finite, reading a large array once and allocating nothing."""
    if array.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return _magnitude_bound(array) is not None or bool(np.isfinite(array).all())


def _magnitude_bound(array: np.ndarray) -> float | None:
    """An upper bound on ``|x|`` over a float array when it is cheap; ``None``: look closer.

    ``None`` also whenever a value is NaN/Inf, so a bound implies that every value is finite. Call it
    under ``np.errstate(over="ignore", invalid="ignore")`` (the callers enter it once for many arrays:
    it costs more than the dot product of a small array).
    """
    if not array.size:
        return 0.0
    if array.dtype.char in "fd" and array.flags.c_contiguous:
        # A dot product (BLAS: one read, about twice as fast as np.sum on large arrays and four times as
        # fast as isfinite + abs + max on small ones) is NaN/Inf when any value is, or when it overflows;
        # when finite, sqrt(x.x) bounds every |x_i|.
        flat = array.reshape(-1)
        probe = float(np.dot(flat, flat))
        if math.isfinite(probe):
            return math.sqrt(probe)
    return None


@functools.lru_cache(maxsize=64)
def value_limit(dtype: np.dtype) -> tuple[float, float]:
    """Closed range a client value must lie in to be averaged into a parameter of ``dtype``."""
    if dtype.kind == "f":
        half = float(np.finfo(dtype).max) / 2  # w + alpha (w_i - w) cannot overflow
        return -half, half
    info = np.iinfo(dtype)
    return float(info.min), float(info.max)


def _range_problem(array: np.ndarray, limits: tuple[float, float]) -> str | None:
    """``"non-finite values"``, a range message, or ``None`` when every value lies within ``limits``."""
    low, high = limits
    if array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        if info.min >= low and info.max <= high:
            return None
    else:
        bound = _magnitude_bound(array)
        if bound is None and not bool(np.isfinite(array).all()):
            return "non-finite values"
        if bound is not None and -bound >= low and bound <= high:
            return None
    if array.size and (float(array.min()) < low or float(array.max()) > high):
        return f"values outside [{low:.6g}, {high:.6g}], the range its global dtype can average"
    return None


def client_problem(client_params, global_params: Mapping[str, np.ndarray]) -> tuple[str | None, dict]:
    """Why a client's parameters cannot be used (or ``None``), and the arrays as read.

    Each value is read once; the caller must use the returned arrays, never re-read the input.
    """
    if not isinstance(client_params, Mapping):
        return f"parameters must be a mapping of str to arrays, got {type(client_params).__name__}", {}
    try:
        names = list(client_params.keys())
    except Exception as error:  # noqa: BLE001 - a hostile mapping
        return f"parameter names cannot be read ({type(error).__name__})", {}
    present = {name for name in names if isinstance(name, str)}
    missing = [key for key in global_params if key not in present]
    if missing:
        return f"missing key{'s' if len(missing) > 1 else ''} {_listed(missing)}", {}
    extra = [key for key in names if not isinstance(key, str) or key not in global_params]
    if extra:
        return f"unexpected key{'s' if len(extra) > 1 else ''} {_listed(extra)}", {}
    with np.errstate(over="ignore", invalid="ignore"):  # for _magnitude_bound's dot products
        return _read_arrays(client_params, global_params)


def _read_arrays(client_params, global_params: Mapping[str, np.ndarray]) -> tuple[str | None, dict]:
    """:func:`client_problem`'s reading of every array, once the keys are known to match."""
    arrays = {}
    for key, reference in global_params.items():
        try:
            value = client_params[key]
        except Exception as error:  # noqa: BLE001
            return f"key {key!r} cannot be read ({type(error).__name__})", {}
        array, problem = read_array(value)
        if array is None:  # then problem says why
            return f"key {key!r} {problem}", {}
        if array.dtype.kind not in _REAL_KINDS:
            return f"key {key!r} has unsupported dtype {array.dtype} (real floating or integer only)", {}
        if array.shape != reference.shape:
            return f"key {key!r} has shape {array.shape}, expected {reference.shape}", {}
        problem = _range_problem(array, value_limit(reference.dtype))
        if problem == "non-finite values":
            return f"non-finite values in {key!r}", {}
        if problem:
            return f"key {key!r} has {problem} ({reference.dtype})", {}
        arrays[key] = array
    return None, arrays


def read_count(count) -> tuple[float | None, str | None]:
    """``(n, None)`` for a usable example count (eq. ``weight`` needs n > 0), else ``(None, why)``.

    Accepted: a real number (not bool), finite, at least the smallest normal float64 (about 2.2e-308;
    subnormal counts such as 5e-324 are refused) and at most :data:`MAX_COUNT` (2**53).
    """
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Real):
        return None, f"num_examples must be a positive number, got {escape_text(repr(count), 60)}"
    try:
        value = float(count)
    except (OverflowError, ValueError, TypeError):
        return None, "num_examples is not representable as a float64"
    if not np.isfinite(value):
        return None, f"num_examples is not finite ({value!r})"
    if value <= 0:
        return None, f"num_examples must be positive, got {value!r}"
    if value < _SMALLEST_NORMAL:
        return None, f"num_examples {value!r} is subnormal (below {_SMALLEST_NORMAL:.3g})"
    if value > MAX_COUNT:
        return None, f"num_examples {value!r} exceeds the largest accepted count 2**53"
    return value, None


def escape_text(text: str, limit: int = 200) -> str:
    """Client-written text made safe for one log line: control characters escaped, length bounded."""
    if not isinstance(text, str):
        text = str(text)
    if len(text) > limit:
        text = text[:limit] + "..."
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() or not text.isascii() else text


def _listed(keys, limit: int = 3) -> str:
    shown = ", ".join(escape_text(repr(key), 80) for key in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
