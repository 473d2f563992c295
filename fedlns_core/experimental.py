"""Deprecated: the LoRA-native signature is now part of the screener, ``FedLNS(signature="lora")``.

``FedLNS()`` (``signature="auto"``) already screens LoRA payloads by it, on the real payloads, so neither a
separate view nor a selector is needed. :func:`lora_signature` and :func:`lora_selector` still give the view they
gave (a dict of ``<module>.lora_signature.A``/``.B`` statistics per client and a selector for it) and warn; they
will be removed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np

from ._lora import change_norms, lora_pairs
from ._signature import NormSelector

#: Key infix of the signature entries :func:`lora_signature` returns.
LORA_SIGNATURE_INFIX = ".lora_signature."
_A, _B = ".lora_A.weight", ".lora_B.weight"


def _length(shape: tuple[int, ...], axis: int) -> int:
    """How many norms a factor of ``shape`` gives: its columns (``axis`` 1, a convolution's flattened) or rows."""
    return math.prod(shape[1:]) if axis == 1 else shape[0]


def _deprecated(name: str) -> None:
    warnings.warn(
        f"fedlns_core.experimental.{name} is deprecated: FedLNS(signature='lora') (or the default "
        f"'auto') screens LoRA payloads directly",
        FutureWarning,
        stacklevel=3,
    )


def lora_selector() -> NormSelector:
    """The selector that picks :func:`lora_signature`'s entries. Deprecated: use ``FedLNS(signature="lora")``."""
    _deprecated("lora_selector")
    return NormSelector(patterns=[LORA_SIGNATURE_INFIX.replace(".", r"\.")])


def lora_signature(global_params: Mapping[str, np.ndarray], client_params: Mapping) -> tuple[dict, dict]:
    """``(global_view, {client: view})``: per LoRA module the column norms of the change in A
    (``<module>.lora_signature.A``) and the row norms of the change in B (``.B``); the global view is zeros.
    Deprecated: use ``FedLNS(signature="lora")``, which computes the same statistics from the payloads.

    Raises ``ValueError`` when ``global_params`` has no LoRA module, a client lacks one of its entries, or a
    shape differs.
    """
    _deprecated("lora_signature")
    modules = [a[: -len(_A)] for a, _ in lora_pairs(global_params) if a.endswith(_A)]
    if not modules:
        raise ValueError(
            f"lora_signature needs LoRA entries (<module>{_A} and <module>{_B}) in the payload; "
            f"got keys such as {sorted(global_params)[:3]}"
        )
    views: dict[object, dict[str, np.ndarray]] = {}
    for client, params in client_params.items():
        views[client] = {}
        for module in modules:
            for part, suffix, statistic, axis in (("A", _A, "columns", 1), ("B", _B, "rows", 0)):
                reference = np.asarray(global_params[module + suffix])
                if module + suffix not in params:
                    raise ValueError(f"client {client!r} did not send {module + suffix!r}")
                value = np.asarray(params[module + suffix])
                if value.shape != reference.shape:
                    raise ValueError(
                        f"client {client!r}: {module + suffix!r} has shape {value.shape}, the global "
                        f"one {reference.shape}"
                    )
                views[client][f"{module}{LORA_SIGNATURE_INFIX}{part}"] = out = np.empty(_length(reference.shape, axis))
                change_norms(value, reference, statistic, out)
    zeros = {
        f"{module}{LORA_SIGNATURE_INFIX}{part}": np.zeros(_length(np.shape(global_params[module + suffix]), axis))
        for module in modules
        for part, suffix, axis in (("A", _A, 1), ("B", _B, 0))
    }
    return zeros, views
