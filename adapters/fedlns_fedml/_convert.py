"""Translation between FedML's torch state dicts and the named numpy dicts of the core."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np
import torch

from fedlns_torch import tensor_to_numpy


class EntryError(ValueError):
    """An uploaded entry that cannot be read at all (the client is rejected with this reason)."""


def to_numpy(state_dict) -> dict[str, np.ndarray]:
    """Copy every entry of a state dict to a numpy array (all keys; tied weights stay duplicated).

    Copies, so that neither screening nor aggregation can ever write into FedML's tensors.
    Raises :class:`EntryError` for anything that is not a mapping of str to tensor or array.
    """
    if not isinstance(state_dict, Mapping):
        raise EntryError(f"model is a {type(state_dict).__name__}, expected a state dict (mapping)")
    arrays: dict[str, np.ndarray] = {}
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise EntryError(f"state dict key {key!r} is a {type(key).__name__}, expected str")
        if isinstance(value, torch.Tensor):
            if value.is_complex() or value.dtype == torch.bool:
                raise EntryError(f"key {key!r} has unsupported dtype {value.dtype}")
            arrays[key] = tensor_to_numpy(value).copy()
        elif isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
            arrays[key] = value.copy()
        else:
            raise EntryError(f"key {key!r} holds {type(value).__name__}, expected a real tensor or array")
    return arrays


def snapshot(state_dict: Mapping) -> OrderedDict:
    """Detached copy of a state dict, tensors keeping dtype and device (the broadcast w_t)."""
    return OrderedDict(
        (key, value.detach().clone() if isinstance(value, torch.Tensor) else np.array(value, copy=True))
        for key, value in state_dict.items()
    )


def to_state_dict(arrays: Mapping[str, np.ndarray], reference: Mapping) -> OrderedDict:
    """New state dict in ``reference``'s key order, dtypes and devices, filled from ``arrays``."""
    state = OrderedDict()
    for key, like in reference.items():
        value = torch.from_numpy(np.ascontiguousarray(arrays[key]))
        if isinstance(like, torch.Tensor):
            state[key] = value.to(device=like.device, dtype=like.dtype, copy=True)
        else:
            state[key] = value.clone()
    return state
