"""The ``"support"`` retain rule: keep the clients whose full update the majority of the population supports.

Not in the paper. The paper's rule keeps the low-deviation group of the normalization signatures, so a client
that changes its normalization parameters *less* than honest clients (sending back the ones it received, or a
small negative multiple of the honest mean) is kept and the honest clients are rejected. This rule asks each
client a question against the population the history bank remembers, not against the round (whose majority an
attacker may hold):

1. **Sketches**: each client's full update ``u_i = w_i - w`` is reduced to a sketch ``s_i = S u_i`` (below),
   banked beside its normalization signature with the round it was sent in.
2. **The population's groups**: the ``recent`` most recently refreshed bank entries (the activation threshold:
   a bank size planned to hold an honest majority) are grouped by average-linkage clustering of their
   cosines, cut into as many groups (at most ``max_groups``) as leave one group holding a strict majority of
   them. That group ``H`` is taken as honest. Another group ``G`` is *separated* when the mean cosine between
   its entries and ``H``'s is below ``separation`` times the mean cosine within ``H``, and that is at least
   ``MIN_COHERENCE`` (without a shared direction nothing is separated from it).
3. **Decision**: a round client whose own entry falls in a separated group is rejected (a lone attacker is a
   group of one); one without an entry (a reservoir bank may decline an id) is rejected when its mean cosine to
   the entries of a separated group exceeds its mean cosine to ``H``'s. Its *support*, the mean cosine to
   ``H``'s entries other than its own, is reported either way.
4. **Loud normalization change**: the paper's deviation score ``delta_i`` (eq. ``client_score``) above the
   scores the recent entries were screened with by more than ``loud_separation`` robust standard deviations
   (1.4826 MAD) is rejected as *loud*: normalization parameters are a tiny share of an update's norm, so the
   full-update view cannot see a blown-up normalization change, and the paper's statistic can.

Why groups and not a threshold on each client's support: measured on recorded rounds (GPT, ``cpu`` preset, 40%
malicious, seed 100), honest updates have mean cosine 0.41 with each other within a round and 0.3 across 1-6
rounds on a well-trained model, updates trained on corrupted targets 0.6 with each other and 0.1 with honest
ones. The attackers are the *tighter* group, and as the model converges a client's median cosine to the
population falls for honest clients and rises for attackers until a fixed ratio no longer separates them; the
groups stay apart. A clean population has no separated group, so nobody is rejected in clean rounds.

The sketch is ``S u = sum_b (r * u)[b*k:(b+1)*k]``: the update flattened over the sorted parameter names,
multiplied coordinate-wise by random signs ``r`` drawn from the screener's seed, and folded into ``k``
buckets by position. Random signs make ``E <Su, Sv> = <u, v>`` for any fixed bucketing, so cosines of
sketches estimate cosines of updates (error about ``1/sqrt(k)``), for ``O(P)`` work per client and ``k``
numbers per bank entry. The signs are the server's secret; an attacker who knows them could hide a
perturbation in the sketch's null space (see ``docs/attacks.md``, threat model).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from ._robust import _run_blocks

#: Names of the sketch's block and of the round stamp in the bank's layout (they follow the normalization keys).
SKETCH_KEY = "__fedlns_update_sketch__"
ROUND_KEY = "__fedlns_round__"
#: Below this mean cosine within the majority group there is no shared direction to be separated from (updates
#: of noise, or a stalled model): no group is separated. Language-model updates measured 0.3-0.6.
MIN_COHERENCE = 0.1
_CHUNK = 1 << 20  # coordinates per sign draw and fold
_CACHED_CHUNKS = 64  # sign draws kept between rounds (64 MiB at most)


def update_sketch(
    global_params: Mapping[str, np.ndarray],
    client_params: Mapping[str, np.ndarray],
    keys: Sequence[str],
    dim: int,
    seed: int,
) -> tuple[np.ndarray, float]:
    """The random-sign folded sketch ``S (w_i - w)`` (length ``dim``) over ``keys``, and ``||w_i - w||``.

    The sign of coordinate ``p`` of the concatenated update depends only on ``(seed, p)``, so every client of
    every round is sketched by the same ``S``. :func:`sketch_updates` sketches many clients at once.

    Examples
    --------
    >>> g = {"a": np.zeros(5), "b": np.zeros(3)}
    >>> u, v = {"a": np.arange(5.0), "b": np.ones(3)}, {"a": -np.arange(5.0), "b": -np.ones(3)}
    >>> (s, norm), (t, _) = update_sketch(g, u, ["a", "b"], 4, 0), update_sketch(g, v, ["a", "b"], 4, 0)
    >>> bool(np.allclose(s, -t)), round(norm ** 2, 6)
    (True, 33.0)
    """
    sketches, norms = sketch_updates(global_params, [client_params], keys, dim, seed)
    return sketches[0], float(norms[0])


def sketch_updates(
    global_params: Mapping[str, np.ndarray],
    clients: Sequence[Mapping[str, np.ndarray]],
    keys: Sequence[str],
    dim: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Sketches (N, dim), rounded to float32, and update norms (N,) of N clients.

    The sketches are summed in float64 and rounded to float32 values (stored in float64) at the end: their own
    error is about ``1/sqrt(dim)``, and float32 values keep the history bank that stores them beside a float32
    signature in float32 (half the memory and sorting time of float64).

    Each update is formed, signed and folded in the parameters' precision (float32 for float32 models, float64
    above it; a chunk's fold sums about ``2**20 / dim`` values per bucket, relative error about 1e-6 in float32,
    far below the sketch's own ``1/sqrt(dim)``) and added to float64 sketches: four vector passes per
    coordinate, with reused buffers, the clients split over two threads for large models (numpy releases the
    GIL; every client's sketch is summed in the same order either way, so the result does not depend on the
    split).
    """
    sketches = np.zeros((len(clients), dim))
    squared = np.zeros(len(clients))
    segments = []  # (key, start, stop, first coordinate, working dtype)
    offset = 0
    for key in keys:
        size = np.asarray(global_params[key]).size
        dtype = np.asarray(global_params[key]).dtype
        dtype = np.result_type(dtype, np.float32) if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)
        segments += [(key, start, min(start + _CHUNK, size), offset + start, dtype) for start in range(0, size, _CHUNK)]
        offset += size

    def work(rows: slice) -> None:
        buffers: dict[np.dtype, np.ndarray] = {}
        for key, start, stop, first, dtype in segments:
            n = stop - start
            reference = np.asarray(global_params[key]).reshape(-1)[start:stop]
            signs = _signs(seed, first, n, dtype)
            buffer = buffers.setdefault(dtype, np.empty(min(offset, _CHUNK), dtype=dtype))[:n]
            for row in range(rows.start, rows.stop):
                update = np.subtract(
                    np.asarray(clients[row][key]).reshape(-1)[start:stop], reference, out=buffer, dtype=dtype
                )
                squared[row] += float(np.dot(update, update))
                _fold(np.multiply(update, signs, out=update), first % dim, sketches[row])

    halves = [slice(0, (len(clients) + 1) // 2), slice((len(clients) + 1) // 2, len(clients))]
    _run_blocks(work, halves if len(clients) > 1 else [slice(0, len(clients))], offset * len(clients))
    return sketches.astype(np.float32).astype(np.float64), np.sqrt(squared)


def _signs(seed: int, first: int, size: int, dtype: np.dtype) -> np.ndarray:
    """The signs (+1/-1, in ``dtype``) of coordinates ``first .. first + size - 1``: coordinate ``p``'s sign
    is bit ``p % _CHUNK`` of chunk ``p // _CHUNK``'s draw (:func:`_sign_bits`)."""
    out = np.empty(size, dtype=dtype)
    done = 0
    while done < size:
        chunk, within = divmod(first + done, _CHUNK)
        step = min(size - done, _CHUNK - within)
        np.multiply(_sign_bits(seed, chunk)[within : within + step], 2, out=out[done : done + step], dtype=dtype)
        done += step
    out -= 1
    return out


@functools.lru_cache(maxsize=_CACHED_CHUNKS)
def _sign_bits(seed: int, chunk: int) -> np.ndarray:
    """Chunk ``chunk``'s ``_CHUNK`` random bits under ``seed`` (int8, read-only). Drawing them costs more than
    sketching one client's chunk, so the last ``_CACHED_CHUNKS`` chunks drawn are kept (1 MiB each): every
    round of a model up to that many mebi-parameters reuses them."""
    bits = np.random.default_rng(np.random.SeedSequence([seed, chunk])).integers(0, 2, _CHUNK, dtype=np.int8)
    bits.flags.writeable = False
    return bits


def _fold(values: np.ndarray, shift: int, out: np.ndarray) -> None:
    """``out[(shift + j) % k] += values[j]`` for every j: the part up to the next multiple of k, whole rows of k
    summed as a (rows, k) view, then the rest.

    Examples
    --------
    >>> out = np.zeros(3)
    >>> _fold(np.arange(1.0, 8.0), 2, out)     # positions 2..8 -> buckets 2, 0, 1, 2, 0, 1, 2
    >>> out.tolist()
    [7.0, 9.0, 12.0]
    """
    k = out.size
    head = min((k - shift) % k, values.size)
    out[shift : shift + head] += values[:head]
    rows = (values.size - head) // k
    if rows:
        out += values[head : head + rows * k].reshape(rows, k).sum(axis=0)
    tail = values[head + rows * k :]
    out[: tail.size] += tail


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def recent_rows(stamps: np.ndarray, recent: int) -> np.ndarray:
    """Indices of the ``recent`` most recently refreshed bank entries (ties at the cut: every tied entry)."""
    if stamps.size <= recent:
        return np.arange(stamps.size)
    cut = np.sort(stamps)[::-1][recent - 1]
    return np.flatnonzero(stamps >= cut)


@dataclass(frozen=True)
class PopulationGroups:
    """The recent bank's majority group and the groups separated from it (boolean masks over the entries)."""

    majority: np.ndarray  # (R,) bool
    separated: tuple[np.ndarray, ...]  # each (R,) bool
    within: float  # mean cosine between distinct majority entries


def average_linkage(cosines: np.ndarray) -> np.ndarray:
    """scipy's average-linkage tree of N items from their (N, N) cosines (distance ``1 - cosine``)."""
    distances = 1.0 - np.clip(cosines, -1.0, 1.0)
    np.fill_diagonal(distances, 0.0)
    return linkage(squareform(distances, checks=False), "average")


def population_groups(cosines: np.ndarray, *, max_groups: int, separation: float) -> PopulationGroups | None:
    """Group R bank entries by their (R, R) cosines; None when no cut leaves a strict-majority group.

    Examples
    --------
    >>> honest, attack = np.array([1.0, 0.2, 0.0]), np.array([0.0, 0.2, 1.0])
    >>> rows = _unit(np.stack([honest + 0.1 * i * np.array([0, 1, -1]) for i in range(4)]
    ...                       + [attack + 0.05 * i for i in range(3)]))
    >>> groups = population_groups(rows @ rows.T, max_groups=4, separation=0.5)
    >>> groups.majority.tolist(), [group.tolist() for group in groups.separated]
    ([True, True, True, True, False, False, False], [[False, False, False, False, True, True, True]])
    """
    n = cosines.shape[0]
    if n < 3:
        return None
    tree = average_linkage(cosines)
    labels = None
    for k in range(2, max_groups + 1):
        cut = fcluster(tree, k, "maxclust")
        if 2 * np.bincount(cut).max() <= n:
            break
        labels = cut
    if labels is None:
        return None
    largest = int(np.bincount(labels).argmax())
    majority = labels == largest
    pairs = cosines[np.ix_(majority, majority)]
    count = int(majority.sum())
    within = float((pairs.sum() - np.trace(pairs)) / max(count * (count - 1), 1))
    separated = tuple(
        labels == label
        for label in np.unique(labels)
        if label != largest
        and within >= MIN_COHERENCE
        and cosines[np.ix_(majority, labels == label)].mean() < separation * within
    )
    return PopulationGroups(majority, separated, within)


@dataclass(frozen=True)
class SupportOutcome:
    """What the support rule decided for the round's N clients (canonical order)."""

    retained: np.ndarray  # (N,) bool
    reasons: tuple[str, ...]  # (N,) "" for a retained client
    support: np.ndarray  # (N,) mean cosine to the majority group (nan without one)
    groups: PopulationGroups | None
    loud_threshold: float | None  # None where the bank's scores have no spread
    loud: np.ndarray  # (N,) bool: rejected by the loud test (and by nothing before it)


def support_rule(
    scores: np.ndarray,
    sketches: np.ndarray,
    bank_sketches: np.ndarray,
    own: np.ndarray,
    stamps: np.ndarray,
    bank_scores: np.ndarray,
    *,
    recent: int,
    max_groups: int,
    separation: float,
    loud_separation: float,
    change: str = "normalization change",
) -> SupportOutcome:
    """Decide a round by the population's groups of full updates and the loud-normalization test.

    Parameters
    ----------
    scores : (N,)
        The round's deviation scores ``delta`` (eq. ``client_score``).
    sketches, bank_sketches : (N, k), (B, k)
        Full-update sketches of the round and of the bank.
    own : (N,) int
        Each round client's own row in the bank (left out of its comparisons), -1 where it has none.
    stamps, bank_scores : (B,), (B,)
        The round each bank entry was last refreshed in and the score it was screened with; the ``recent``
        latest entries are grouped, and their scores are the loud test's reference.
    change : str
        What the signature reads, as the reasons name it (``"LoRA change"`` for the LoRA signature).
    """
    n = scores.shape[0]
    reasons = [""] * n
    rows = recent_rows(stamps, recent)
    position = np.full(stamps.size, -1)
    position[rows] = np.arange(rows.size)
    bank = _unit(bank_sketches[rows])
    groups = population_groups(bank @ bank.T, max_groups=max_groups, separation=separation)
    support = np.full(n, np.nan)
    if groups is not None:
        cosines = _unit(sketches) @ bank.T  # (N, R)
        for i in range(n):
            others = np.ones(rows.size, dtype=bool)
            if own[i] >= 0 and position[own[i]] >= 0:
                others[position[own[i]]] = False
            majority = groups.majority & others
            support[i] = cosines[i, majority].mean() if majority.any() else np.nan
            for group in groups.separated:
                members = group & others
                if others.all():
                    closer = members.any() and cosines[i, members].mean() > support[i]
                else:
                    closer = bool(group[position[own[i]]])
                if closer:
                    reasons[i] = (
                        f"in a group separated from the population's majority (its update's mean "
                        f"cosine {support[i]:.3g} to the majority's {int(majority.sum())} recent "
                        f"entries, whose own is {groups.within:.3g})"
                    )
                    break
    loud_threshold, loud = loud_reasons(scores, bank_scores[rows], loud_separation, reasons, change)
    retained = np.array([not reason for reason in reasons], dtype=bool)
    return SupportOutcome(retained, tuple(reasons), support, groups, loud_threshold, loud)


def loud_reasons(
    scores: np.ndarray,
    reference: np.ndarray,
    loud_separation: float,
    reasons: list,
    change: str = "normalization change",
) -> tuple[float | None, np.ndarray]:
    """Mark (in ``reasons``, where still empty, as a loud ``change``) the scores more than ``loud_separation`` robust
    widths (1.4826 MAD) above the median of the ``reference`` scores; return that threshold (None where they have no
    spread) and which clients were so marked ((N,) bool)."""
    reference = reference[np.isfinite(reference)]
    centre = float(np.median(reference)) if reference.size else 0.0
    spread = 1.4826 * float(np.median(np.abs(reference - centre))) if reference.size else 0.0
    threshold = centre + loud_separation * spread if spread > 0 else None
    marked = np.zeros(len(reasons), dtype=bool)
    if threshold is not None:
        for i in np.flatnonzero(scores > threshold).tolist():
            if not reasons[i]:
                reasons[i] = (
                    f"loud {change} (delta {scores[i]:.3g} above "
                    f"{threshold:.3g}: {loud_separation:g} robust widths over "
                    f"the bank's median {centre:.3g})"
                )
                marked[i] = True
    return threshold, marked


def clip_scales(norms: Mapping, retained: Sequence, quantile: float = 0.5) -> dict:
    """Bounded influence: each retained update scaled to at most the ``quantile`` of the retained norms (the median
    by default)."""
    if not retained:
        return {}
    limit = float(np.quantile([norms[client_id] for client_id in retained], quantile))
    return {client_id: (min(1.0, limit / norms[client_id]) if norms[client_id] > 0 else 1.0) for client_id in retained}
