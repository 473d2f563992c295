"""The screener's settings, declared once with their constraints and checked in one place.

``FedLNS``, ``HistoryBank`` and the state-file loader all validate through :func:`validate_settings`
(the model is scikit-learn's ``_parameter_constraints``): a setting is listed here once, with the
values it accepts, and nowhere else.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._signature import NAME_MATCHES, SIGNATURES, NormSelector


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``"int"`` or ``"real"``) between ``low`` and ``high``."""

    kind: str
    low: float | None = None
    high: float | None = None
    closed: str = "both"  # "both", "left", "right" or "neither"

    def normalize(self, value):
        if isinstance(value, (bool, np.bool_)):
            return None
        if self.kind == "int":
            if not isinstance(value, numbers.Integral):
                return None
            value = int(value)
        else:
            if not isinstance(value, numbers.Real):
                return None
            value = float(value)
            if not math.isfinite(value):
                return None
        low_ok = self.low is None or (value >= self.low if self.closed in ("both", "left") else value > self.low)
        high_ok = self.high is None or (value <= self.high if self.closed in ("both", "right") else value < self.high)
        return value if low_ok and high_ok else None

    def describe(self) -> str:
        kind = "an int" if self.kind == "int" else "a finite number"
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        if self.low is None and self.high is None:
            return kind
        return (
            f"{kind} in {left}{'-inf' if self.low is None else self.low}, "
            f"{'inf' if self.high is None else self.high}{right}"
        )


@dataclass(frozen=True)
class Options:
    """One of a fixed set of strings."""

    values: tuple[str, ...]

    def normalize(self, value):
        return value if isinstance(value, str) and value in self.values else None

    def describe(self) -> str:
        return "one of " + ", ".join(repr(value) for value in self.values)


@dataclass(frozen=True)
class InstanceOf:
    """An instance of a class."""

    cls: type

    def normalize(self, value):
        return value if isinstance(value, self.cls) else None

    def describe(self) -> str:
        return f"a {self.cls.__name__}"


_NONE = object()

#: Every setting of the screener and its bank, with the values it accepts (``None`` where listed).
PARAMETER_CONSTRAINTS: dict[str, list] = {
    "signature": [Options(SIGNATURES)],
    "selector": [InstanceOf(NormSelector), None],
    "activation_threshold": [Interval("int", 0)],
    "mad_floor": [Interval("real", 0, None, closed="neither")],
    "components": [Options(("bic", "two"))],
    "reg_covar": [Interval("real", 0)],
    "n_init": [Interval("int", 1)],
    "max_iter": [Interval("int", 1)],
    "mixture_solver": [Options(("fast", "sklearn"))],
    "ema": [Interval("real", 0, 1, closed="left")],
    "warmup": [Options(("aggregate", "hold", "screen"))],
    "max_clients": [Interval("int", 1), None],
    "random_state": [Interval("int", 0, 2**128 - 1), None],
    "max_count_ratio": [Interval("real", 1), None],
    "retain_rule": [Options(("cohort", "support", "paper", "guarded", "peeled", "bank"))],
    "lone_separation": [Interval("real", 0)],
    "min_separation": [Interval("real", 0)],
    "separation": [Interval("real", 0, 1, closed="neither")],
    "max_groups": [Interval("int", 2)],
    "loud_separation": [Interval("real", 0, None, closed="neither")],
    "cohort_decay": [Interval("real", 0, 1, closed="right")],
    "cohort_undecided": [Options(("support", "keep", "hold", "deviation", "hold_contested", "adaptive"))],
    "cohort_cut": [Options(("tree", "significant", "confirmed", "centered"))],
    "cohort_vote": [Options(("round", "history", "strong", "placed", "settled"))],
    "cohort_weight": [Options(("unit", "coherence", "agreeing"))],
    "cohort_margin": [Interval("real", 0, 1, closed="both")],
    "cohort_balance": [Interval("real", 0, 1, closed="both")],
    "cohort_contested": [Options(("hold", "reject"))],
    "cohort_strong_minority": [Options(("support", "reject"))],
    "cohort_open": [Options(("support", "keep"))],
    "quorum": [Interval("real", 0, 1, closed="both")],
    "sketch_dim": [Interval("int", 16)],
    "clip": [Options(("median",)), None],
}

#: :class:`~fedlns_core.NormSelector`'s name-matching scheme (its ``patterns`` and ``keys`` are checked where
#: they are read: a list of regular expressions or of names).
SELECTOR_CONSTRAINTS: dict[str, list] = {
    "match": [Options(tuple(NAME_MATCHES))],
}


def options(name: str, table: Mapping[str, list] = PARAMETER_CONSTRAINTS) -> tuple[str, ...]:
    """The string values a setting of ``table`` accepts (its :class:`Options`).

    Examples
    --------
    >>> options("mixture_solver")
    ('fast', 'sklearn')
    >>> options("match", SELECTOR_CONSTRAINTS)
    ('auto', 'paper')
    """
    for constraint in table[name]:
        if isinstance(constraint, Options):
            return constraint.values
    raise ValueError(f"setting {name!r} takes no fixed set of strings")


def validate_settings(
    owner: str, settings: Mapping[str, Any], table: Mapping[str, list] = PARAMETER_CONSTRAINTS
) -> dict[str, Any]:
    """Check ``settings`` against ``table`` (the screener's by default); return them as plain Python values.

    numpy scalars are accepted wherever the Python type is (``np.int64(5)`` for an int) and come back as
    ``int``/``float``. Raises ``ValueError`` naming the owner, the setting, what it accepts and what came.
    """
    checked = {}
    for name, value in settings.items():
        if name not in table:
            raise ValueError(f"{owner}: unknown setting {name!r}")
        constraints = table[name]
        normalized = _NONE
        for constraint in constraints:
            if constraint is None:
                if value is None:
                    normalized = None
                    break
                continue
            candidate = constraint.normalize(value)
            if candidate is not None:
                normalized = candidate
                break
        if normalized is _NONE:
            accepted = " or ".join("None" if c is None else c.describe() for c in constraints)
            raise ValueError(f"{owner}: {name} must be {accepted}, got {value!r}")
        checked[name] = normalized
    return checked
