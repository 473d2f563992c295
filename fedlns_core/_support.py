"""The ``"support"`` retain rule: keep the clients whose full update the client population supports.

Not in the paper. The paper's rule keeps the low-deviation group of the normalization signatures, so a client
that changes its normalization parameters *less* than honest clients (sending back the ones it received, or a
small negative multiple of the honest mean) is kept and the honest clients are rejected. This rule asks a
different question of each client, against the whole population the history bank remembers, not against the
round (whose majority an attacker may hold):

1. **Support**: each client's full update ``u_i = w_i - w`` is reduced to a sketch ``s_i = S u_i`` (below),
   banked beside its normalization signature. Its support is the median cosine between its sketch and the
   latest sketches of every *other* client in the bank:
   ``sigma_i = median_{j != i} cos(s_i, s_j)``. Honest updates of a language model point in related
   directions, from round to round as well as within one (measured: cosine about 0.3 at lags of 6-10
   rounds), while an update trained on corrupted targets or crafted against the honest mean is unrelated or
   opposed to them (about 0 or below). A median over the population is above a level only when at least half
   of the bank is that aligned with the client, so a minority of attackers cannot lend itself support,
   whatever it holds of one round. Only the ``recent`` most recently refreshed entries count (the
   activation threshold: a bank size planned to hold a benign majority): honest updates drift apart as
   training goes on (cosine 0.2 at a lag of 20 rounds), while updates trained on corrupted targets keep
   pointing the same way, so old entries would let a large attacking minority catch up. A client whose support falls below ``support_ratio`` times the bank's own
   typical support (the median of the bank entries' supports) is rejected as *unsupported*; that includes a
   client that sends its model unchanged (no direction, no support: a lazy worker).
2. **Loud normalization change**: the paper's deviation score ``delta_i`` (eq. ``client_score``) above the
   bank's scores by more than ``loud_separation`` robust standard deviations (1.4826 MAD) is rejected as
   *loud*: normalization parameters are a tiny share of an update's norm, so the full-update view cannot
   see a blown-up normalization change, and the paper's statistic can.
3. The support test abstains (rejects nobody) while the bank's typical support is below ``MIN_SUPPORT``: there is no
   population direction to be aligned with (a stalled model, or a bank not yet filled).

The sketch is ``S u = sum_b (r * u)[b*k:(b+1)*k]``: the update flattened over the sorted parameter names,
multiplied coordinate-wise by random signs ``r`` drawn from the screener's seed, and folded into ``k``
buckets by position. Random signs make ``E <Su, Sv> = <u, v>`` for any fixed bucketing, so cosines of
sketches estimate cosines of updates (error about ``1/sqrt(k)``), for ``O(P)`` work per client and ``k``
numbers per bank entry. The signs are the server's secret; an attacker who knows them could hide a
perturbation in the sketch's null space (see ``docs/attacks.md``, threat model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ._robust import deviation_scores

#: Names of the sketch's block and of the round stamp in the bank's layout (they follow the normalization keys).
SKETCH_KEY = "__fedlns_update_sketch__"
ROUND_KEY = "__fedlns_round__"
#: A view with a smaller typical support than this has no population direction and abstains.
MIN_SUPPORT = 0.02
#: Bank entries whose supports give the bank's typical support (a seeded sample beyond this).
_REFERENCE_ENTRIES = 256
_CHUNK = 1 << 20          # coordinates per sign draw and fold


def update_sketch(global_params: Mapping[str, np.ndarray], client_params: Mapping[str, np.ndarray],
                  keys: Sequence[str], dim: int, seed: int) -> tuple[np.ndarray, float]:
    """The random-sign folded sketch ``S (w_i - w)`` (length ``dim``) over ``keys``, and ``||w_i - w||``.

    The sign of coordinate ``p`` of the concatenated update depends only on ``(seed, p)``, so every client of
    every round is sketched by the same ``S``.

    Examples
    --------
    >>> g = {"a": np.zeros(5), "b": np.zeros(3)}
    >>> u, v = {"a": np.arange(5.0), "b": np.ones(3)}, {"a": -np.arange(5.0), "b": -np.ones(3)}
    >>> (s, norm), (t, _) = update_sketch(g, u, ["a", "b"], 4, 0), update_sketch(g, v, ["a", "b"], 4, 0)
    >>> bool(np.allclose(s, -t)), round(norm ** 2, 6)
    (True, 33.0)
    """
    out = np.zeros(dim)
    squared = 0.0
    offset = 0
    for key in keys:
        update = np.subtract(client_params[key], global_params[key], dtype=np.float64).reshape(-1)
        squared += float(update @ update)
        for start in range(0, update.size, _CHUNK):
            part = update[start:start + _CHUNK]
            first = offset + start
            _fold(part * _signs(seed, first, part.size), first % dim, out)
        offset += update.size
    return out, float(np.sqrt(squared))


def _signs(seed: int, first: int, size: int) -> np.ndarray:
    """Signs of coordinates ``first .. first + size - 1``, drawn per chunk of ``_CHUNK`` coordinates."""
    signs = np.empty(size)
    done = 0
    while done < size:
        position = first + done
        chunk, within = divmod(position, _CHUNK)
        take = min(size - done, _CHUNK - within)
        rng = np.random.default_rng(np.random.SeedSequence([seed, chunk]))
        bits = rng.integers(0, 2, _CHUNK, dtype=np.int8)[within:within + take]
        signs[done:done + take] = 2.0 * bits - 1.0
        done += take
    return signs


def _fold(values: np.ndarray, shift: int, out: np.ndarray) -> None:
    """``out[(shift + j) % k] += values[j]`` for every j, by padding and summing rows of length k."""
    k = out.size
    rows = -(-(shift + values.size) // k)
    padded = np.zeros(rows * k)
    padded[shift:shift + values.size] = values
    out += padded.reshape(rows, k).sum(axis=0)


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def median_support(rows: np.ndarray, bank: np.ndarray, own: np.ndarray) -> np.ndarray:
    """``median_{j != own[i]} cos(rows[i], bank[j])`` for each row: (N, k), (B, k), (N,) -> (N,).

    A zero vector has cosine 0 with everything. With no other bank entry the support is 0.
    """
    if bank.shape[0] < 2:
        return np.zeros(rows.shape[0])
    cosines = _unit(rows) @ _unit(bank).T                                    # (N, B)
    banked = own >= 0                                                       # a reservoir may decline an id
    cosines[np.flatnonzero(banked), own[banked]] = np.nan
    return np.nanmedian(cosines, axis=1)


def recent_rows(stamps: np.ndarray, recent: int) -> np.ndarray:
    """Indices of the ``recent`` most recently refreshed bank entries (ties at the cut: every tied entry)."""
    if stamps.size <= recent:
        return np.arange(stamps.size)
    cut = np.sort(stamps)[::-1][recent - 1]
    return np.flatnonzero(stamps >= cut)


def bank_support(bank: np.ndarray, random_state: int | None) -> float:
    """The bank's typical support: the median over (a seeded sample of) its entries of their supports."""
    n = bank.shape[0]
    if n < 2:
        return 0.0
    chosen = np.arange(n)
    if n > _REFERENCE_ENTRIES:
        chosen = np.sort(np.random.default_rng(random_state).choice(n, _REFERENCE_ENTRIES, replace=False))
    return float(np.median(median_support(bank[chosen], bank, chosen)))


@dataclass(frozen=True)
class SupportOutcome:
    """What the support rule decided for the round's N clients (canonical order)."""

    retained: np.ndarray                  # (N,) bool
    reasons: tuple[str, ...]              # (N,) "" for a retained client
    support: np.ndarray                   # (N,) full-update support sigma_i
    support_threshold: float | None       # None where the view abstained
    loud_threshold: float | None          # None where the bank's scores have no spread


def support_rule(features: np.ndarray, bank_features: np.ndarray, sketches: np.ndarray,
                 bank_sketches: np.ndarray, own: np.ndarray, stamps: np.ndarray, *, recent: int,
                 support_ratio: float, loud_separation: float, random_state: int | None) -> SupportOutcome:
    """Decide a round by population support of the full update and the loud-normalization test.

    Parameters
    ----------
    features, bank_features : (N, D), (B, D)
        The round's and the bank's normalization signatures standardized against the bank (eq. ``z_full``).
    sketches, bank_sketches : (N, k), (B, k)
        Full-update sketches of the round and of the bank.
    own : (N,) int
        Each round client's own row in the bank (excluded from its support), -1 where it has none.
    stamps : (B,)
        The round each bank entry was last refreshed in; only the ``recent`` latest entries give support.
    """
    reasons = [""] * features.shape[0]
    rows = recent_rows(stamps, recent)
    position = np.full(stamps.size, -1)
    position[rows] = np.arange(rows.size)
    bank_sketches = bank_sketches[rows]
    support = median_support(sketches, bank_sketches, np.where(own >= 0, position[np.maximum(own, 0)], -1))
    typical = bank_support(bank_sketches, random_state)
    support_threshold = support_ratio * typical if typical >= MIN_SUPPORT else None
    if support_threshold is not None:
        for i in np.flatnonzero(support < support_threshold):
            reasons[i] = (f"unsupported update (median cosine to the bank {support[i]:.3g}, needs "
                          f"{support_threshold:.3g} = {support_ratio:g} x the bank's typical {typical:.3g})")
    scores, bank_scores = deviation_scores(features), deviation_scores(bank_features)
    centre = float(np.median(bank_scores))
    spread = 1.4826 * float(np.median(np.abs(bank_scores - centre)))
    loud_threshold = centre + loud_separation * spread if spread > 0 else None
    if loud_threshold is not None:
        for i in np.flatnonzero(scores > loud_threshold):
            reasons[i] = reasons[i] or (f"loud normalization change (delta {scores[i]:.3g} above "
                                        f"{loud_threshold:.3g}: {loud_separation:g} robust widths over "
                                        f"the bank's median {centre:.3g})")
    retained = np.array([not reason for reason in reasons], dtype=bool)
    return SupportOutcome(retained, tuple(reasons), support, support_threshold, loud_threshold)


def clip_scales(norms: Mapping, retained: Sequence) -> dict:
    """Bounded influence: each retained update scaled to at most the retained clients' median norm."""
    if not retained:
        return {}
    limit = float(np.median([norms[client_id] for client_id in retained]))
    return {client_id: (min(1.0, limit / norms[client_id]) if norms[client_id] > 0 else 1.0)
            for client_id in retained}
