"""The ``"cohort"`` retain rule (the default): split the round by its own updates, let the population's history
say which side is honest.

Not in the paper. Two facts, measured on recorded rounds (``docs/results/lora-matrix/lockin``), shape it:

* **Within a round the kinds are apart.** Clients that start from the same global model and train on
  corrupted targets (or send a crafted update) point one way, honest clients another: in the LoRA scenario
  (GPT, 40% malicious) the mean cosine of update sketches is 0.35 between honest clients of a round, 0.73
  between attackers and -0.16 across, and one average-linkage cut of the round separated them exactly in 31 of
  33 screened rounds.
* **Across rounds updates need not agree.** The same honest clients' LoRA updates have cosine 0.08-0.14 one to
  six rounds apart (the adapter *is* the accumulated update, so its direction moves with it), and an honest
  round's direction ranges from -0.7 to +0.6 against earlier attackers'. The ``"support"`` rule, which groups
  sketches of many rounds, then builds its "majority group" around the one coherent group, the attackers.

So the rule compares updates only within their round, and takes what links rounds from the clients' ids,
which is what the history bank is keyed by anyway:

1. **The round's parts.** The round's update sketches (``fedlns_core._support``) are cut in two by
   average-linkage clustering of their cosines. The parts are *apart* when the larger of their mean cosines
   within is at least ``MIN_COHERENCE`` and the mean cosine across is below ``separation`` times it (and, with
   ``cohort_cut="significant"``, the cut is wider than the one the tree finds in rounds of exchangeable clients as
   alike as these, :func:`round_parts`); else the round is one part (a clean round, or attackers the updates
   cannot tell apart; with ``cohort_cut="confirmed"``, :func:`confirmed_cut` then looks for a group the history
   already places in the minority, step 4; with ``cohort_cut="centered"``, :func:`centered_parts` first cuts the
   updates with the direction every client of the round shares removed).
2. **The cohort graph.** Every split round adds +1 between two of its clients in the same part and -1 between
   two in different parts to a signed graph over client ids (the bank's ids); older evidence decays by
   ``cohort_decay`` per round, so a client's standing follows what it sends now. With
   ``cohort_weight="coherence"`` the round's edges weigh the mean cosine within the cut's core instead of 1; with
   ``"agreeing"`` a weak cut (core below ``STRONG_CUT``) adds its edge only between two clients whose own cosine
   agrees with it (:func:`edge_strength`).
3. **The population's cohorts.** The sign of each id in the graph's leading eigenvector (largest eigenvalue;
   for two antagonistic groups it is +1 on one and -1 on the other) splits the ids in two; a side holding
   more than half of all the bank's ids is the majority cohort (the population's honest majority, as the
   bank's threshold is planned to give). Ids the leading component does not reach are unplaced; without a
   side holding more than half, nobody is placed.
4. **Decision.** In a split round each part gets a vote: +1 for each member in the majority cohort, -1 for
   each in the minority, 0 for an unplaced one. The part with the lower vote is rejected when that vote is
   negative. The current round's edges are in the graph before the vote, so a client seen for the first time
   is placed by whom it sided with (and so is everyone: the cut being decided also votes). With
   ``cohort_vote="history"`` the sides are read from the graph before the round's edges, and only ids it leaves
   unplaced are placed with them, so a cut cannot confirm itself; with ``"strong"`` so for weak cuts (the core's
   mean cosine within below ``STRONG_CUT``), while a strong cut still votes with its own edges; with ``"placed"``
   as ``"strong"``, except that a weak cut places nobody (the ids the history leaves unplaced vote 0); with
   ``"settled"`` as ``"placed"`` once the history holds a majority cohort, and as ``"round"`` before (a history
   that places nobody yet cannot vote). A round that does not split keeps everyone.
5. **Loud normalization change**, as in the ``"support"`` rule: a deviation score ``delta_i`` more than
   ``loud_separation`` robust widths above the recent bank entries' scores is rejected.

Properties this buys. A round in which the attackers hold the majority is still decided by the population (their
part's members are minority-side ids); a quiet group (sending back the received normalization parameters) and a
loud one are treated alike, as parts apart; an honest client that is an outlier in one round is not rejected for
it (its id is majority-side), and a client is never rejected without an update apart from the others in this
round. What it needs: ids that come back (the graph links rounds through them); ids seen in no split round are
unplaced, so a round made only of new ids keeps everyone. What gets through: attackers whose updates a round
cannot tell from honest ones (``alie``, ``backdoor``), as with every rule that reads updates. What breaks it: honest
updates that agree only weakly, cut into a small honest core against the rest, attackers and honest clients
together; those cuts join attackers with honest ids and split the honest ids, until the graph's leading eigenvector
puts the attackers on the side that holds most of the bank's ids and rounds keep attackers only (``weak_core``,
which adds private noise until the attackers agree no more than honest clients do:
``docs/results/cohort-weight/seeds``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ._support import MIN_COHERENCE, _unit, average_linkage, loud_reasons, recent_rows
from ._types import ClientId

#: ``cohort_undecided="adaptive"``: the history's updates agree across rounds when the median cosine between recent
#: bank entries of different rounds is at least this. Replayed on recorded runs (``docs/results/adaptive``): a GPT
#: trained from scratch (the ``cpu`` preset) 0.16-0.48 after its first 10 rounds (0.05-0.07 before), the LoRA
#: adapters of the three families -0.08-0.11.
CONSISTENT_HISTORY = 0.15

#: ``cohort_vote="strong"``: a cut whose core agrees at least this much (mean cosine within) votes with its own
#: edges, a weaker one with the history before them. Measured in the LoRA scenario: attackers' cores 0.74-0.84,
#: the cores the tree cuts from honest clients alone 0.10-0.15 (docs/results/cohort-vote).
STRONG_CUT = 0.5

#: How a client rejected by ``cohort_cut="confirmed"``'s cut (:func:`confirmed_cut`) has its reason begin; reports
#: count the rounds where it fired by it.
CONFIRMED_REASON = "in a group of the round that agrees more within"

#: The ``cohort_cut`` settings that, in a round without a cut, search the history for one (:func:`confirmed_cut`).
HISTORY_CUTS = ("confirmed", "centered")

#: How the reason of a client rejected in a part of :func:`centered_parts`'s cut begins.
CENTERED_REASON = "in the part of the round apart from the rest once the round's shared direction is removed"

#: Above this many ids the leading eigenvector is found by Lanczos iterations instead of a full decomposition.
_DENSE_EIGEN_LIMIT = 400


@dataclass(frozen=True)
class RoundParts:
    """A round's cut in two: ``first`` (N,) bool marks the coherent part; ``within`` its mean cosine within,
    ``across`` the mean cosine between the parts; ``apart`` whether the cut counts."""

    first: np.ndarray
    within: float
    across: float
    apart: bool


#: A cut counts only when it is wider than the cut in every one of this many simulated rounds of exchangeable
#: clients (:func:`round_parts`): about one round in ``NULL_ROUNDS + 1`` of a single population is cut by chance.
NULL_ROUNDS = 99


def round_parts(
    cosines: np.ndarray, *, separation: float, dimension: int | None = None, significant: bool = False
) -> RoundParts | None:
    """Cut a round's clients in two by their (N, N) update cosines; None for fewer than 3 clients.

    Every group of the average-linkage tree of the round (every cluster of every cut) of at least two clients
    is a candidate *core*; it is apart from the rest when its mean cosine within is coherent and its mean cosine
    to the rest is below ``separation`` times that. Coherent: at least ``MIN_COHERENCE``, and at least four
    standard errors above chance, where two unrelated updates of ``dimension`` independent numbers have cosines
    of about ``1 / sqrt(dimension)``: a core of m clients averages m (m - 1) / 2 of them, so it needs
    ``4 / sqrt(dimension * m (m - 1) / 2)``. Without this, two noise updates of a small model that happen to
    agree would be a core. Of the cores apart from the rest, the one with the most coherence (size times mean
    cosine within) cuts the round: two opposed groups give the same cut whichever is the core, and updates that
    agree with nothing (noise) all land outside the core that the honest clients form, however many there are.

    With ``significant`` (``FedLNS(cohort_cut="significant")``), the cut counts only if it is also wider than
    chance: a round of clients from one population whose updates agree weakly (a small masked model's LoRA
    updates: mean cosine 0.03-0.05, spread 0.05) always has some group that agrees a little more, and the tree
    finds it. So the cut's gap ``within - across`` is measured in units of the spread of the round's pair cosines
    around their own group's median (:func:`cut_effect`) and compared with the same measure of the cut the tree
    makes in ``NULL_ROUNDS`` simulated rounds of N exchangeable clients with the round's mean cosine and that
    spread (:func:`_null_cosines`). The cut counts when it is wider than every one of them (a p-value of at most
    ``1 / (NULL_ROUNDS + 1)``). The simulation's seed is fixed, so the same cosines always give the same cut.
    Without a cut that counts the round is one part (``apart=False``; ``first`` is then everyone).

    Examples
    --------
    >>> honest, attack = np.array([1.0, 0.3, 0.0]), np.array([0.0, 0.3, 1.0])
    >>> rows = _unit(np.stack([honest + 0.1 * i * np.array([0, 1, -1]) for i in range(4)]
    ...                       + [attack + 0.05 * i for i in range(3)]))
    >>> parts = round_parts(rows @ rows.T, separation=0.5)
    >>> parts.apart, parts.first.tolist()
    (True, [True, True, True, True, False, False, False])
    """
    n = cosines.shape[0]
    if n < 3:
        return None
    one_part = RoundParts(np.ones(n, dtype=bool), float("nan"), float("nan"), False)
    cut = _best_cut(cosines, separation, dimension)
    if cut is None:
        return one_part
    first, within, across = cut
    if not significant:
        return RoundParts(first, within, across, True)
    effect, spread = cut_effect(cosines, first)
    if np.isfinite(effect):  # a zero spread (identical updates on each side) needs no simulation
        rng = np.random.default_rng(n)
        mean = float((cosines.sum() - np.trace(cosines)) / (n * (n - 1)))
        for _ in range(NULL_ROUNDS):
            null = _null_cosines(rng, n, mean, spread)
            null_cut = _best_cut(null, separation, dimension)
            if null_cut is not None and cut_effect(null, null_cut[0])[0] >= effect:
                return one_part
    return RoundParts(first, within, across, True)


def _tree_groups(cosines: np.ndarray, dimension: int | None) -> Iterator[tuple[np.ndarray, float, float, bool]]:
    """Every group of the average-linkage tree of a round of at least two clients and fewer than all: yields
    (members, within, across, coherent), with the mean cosines within the group and between it and the rest, and
    whether it is coherent (:func:`round_parts`)."""
    n = cosines.shape[0]
    tree = average_linkage(cosines)
    row_sums = cosines.sum(axis=1) - np.diag(cosines)
    members: list[np.ndarray] = [np.array([i]) for i in range(n)]
    inner = [0.0] * n  # sum of cosines between distinct members, per tree node
    to_node = list(cosines)  # per tree node: each client's summed cosine to its members
    for left, right, _, _ in tree:
        a, b = int(left), int(right)
        group = np.concatenate([members[a], members[b]])
        total = inner[a] + inner[b] + 2.0 * float(to_node[a][members[b]].sum())  # a, b disjoint
        members.append(group)
        inner.append(total)
        to_node.append(to_node[a] + to_node[b])
        size = group.size
        if size >= n:
            continue
        within = total / (size * (size - 1))
        across = (float(row_sums[group].sum()) - total) / (size * (n - size))
        chance = 0.0 if dimension is None else 4.0 / np.sqrt(dimension * size * (size - 1) / 2)
        yield group, within, across, within >= max(MIN_COHERENCE, chance)


def _best_cut(cosines: np.ndarray, separation: float, dimension: int | None) -> tuple[np.ndarray, float, float] | None:
    """The most coherent core apart from the rest (:func:`round_parts`, before the significance test): (first,
    within, across), or None."""
    best = None  # (coherence, members, within, across)
    for group, within, across, coherent in _tree_groups(cosines, dimension):
        if coherent and across < separation * within and (best is None or group.size * within > best[0]):
            best = (group.size * within, group, within, across)
    if best is None:
        return None
    first = np.zeros(cosines.shape[0], dtype=bool)
    first[best[1]] = True
    return first, best[2], best[3]


def centered_parts(sketches: np.ndarray, *, separation: float, dimension: int | None = None) -> RoundParts | None:
    """``cohort_cut="centered"``: the round's cut once the direction every client shares is removed.

    Each sketch minus the round's coordinate-wise median sketch, then :func:`round_parts` on their cosines with the
    significance test. Where every update of a round is mostly one shared direction (the `paper` preset's GPT from
    scratch: cosines 0.49-0.75 between honest and corrupted updates, 0.83-0.93 among honest ones), the tree finds no
    parts apart; what is left after the median goes points one way for each kind, and opposite ways when there are
    two (docs/results/gpu-paper). The median, not the mean, so that a minority cannot move the centre far; the
    significance test, because in a round of one population the residuals are noise, and the tree finds small
    groups in noise (pairs in clean non-IID rounds of the ``cpu`` preset).

    >>> rng = np.random.default_rng(0)
    >>> shared, honest, attack = (rng.standard_normal(512) for _ in range(3))
    >>> rows = np.stack([4 * shared + (attack if i < 4 else honest) + rng.standard_normal(512) for i in range(10)])
    >>> units = _unit(rows)
    >>> round_parts(units @ units.T, separation=0.5).apart   # the shared direction hides the two kinds
    False
    >>> parts = centered_parts(rows, separation=0.5)
    >>> parts.apart, np.flatnonzero(parts.first).tolist()
    (True, [0, 1, 2, 3])
    """
    centered = _unit(sketches - np.median(sketches, axis=0))
    return round_parts(centered @ centered.T, separation=separation, dimension=dimension, significant=True)


def confirmed_cut(
    cosines: np.ndarray, sides: Sequence[int], dimension: int | None = None
) -> tuple[np.ndarray, float, float] | None:
    """``cohort_cut="confirmed"``: in a round whose parts are not apart, the group the history singles out.

    Of the tree's coherent groups (:func:`round_parts`) that agree more within than with the rest (``across <
    within``, a weaker bar than ``separation``), those whose members ``sides`` (+1 majority cohort, -1 minority,
    0 unplaced; the graph before the round) places outside the majority, at least two of them in the minority,
    while it places nobody outside them in the minority; the most coherent (size times mean cosine within) is
    returned as (first, within, across), else None. Where updates share a large common part (a model trained
    from scratch: BERT's rounds have cosines of 0.4-0.6 between honest and corrupted updates, above half of the
    0.7-0.8 within each kind), the round's geometry alone never counts the cut the history has already made.

    >>> c = np.array([[1.0, 0.8, 0.5, 0.5], [0.8, 1.0, 0.5, 0.5], [0.5, 0.5, 1.0, 0.7], [0.5, 0.5, 0.7, 1.0]])
    >>> confirmed_cut(c, [-1, -1, 1, 0])[0].tolist()
    [True, True, False, False]
    >>> confirmed_cut(c, [-1, 1, 1, 0]) is None   # the history splits the group
    True
    """
    side = np.asarray(sides)
    best = None
    for group, within, across, coherent in _tree_groups(cosines, dimension):
        inside = np.zeros(side.size, dtype=bool)
        inside[group] = True
        singled_out = (side[inside] <= 0).all() and int((side[inside] < 0).sum()) >= 2 and (side[~inside] >= 0).all()
        if coherent and across < within and singled_out and (best is None or group.size * within > best[0]):
            best = (group.size * within, inside, within, across)
    return None if best is None else (best[1], best[2], best[3])


def deviation_part(scores: np.ndarray, first: np.ndarray, reference: np.ndarray) -> tuple[int, str, float] | None:
    """``cohort_undecided="deviation"``: the part of a cut that the deviation score ``delta`` tells apart, if any.

    The paper's statistic, read on both sides, for a round the history cannot decide. A part is rejected when

    * every member's ``delta`` lies on one side of every other client's (all above: a loud change; all below: a
      quiet one, as ``norm_freeze`` sends, down to no change at all),
    * its median ``delta`` is further from the population's typical change (the median of ``reference``, the
      recent bank entries' scores) than the other part's, by ratio (``|log(delta / typical)|``: scores are
      magnitudes, and a zero change is infinitely quiet), and
    * it is the smaller part: a decision the round's majority would lose is not made on one statistic an
      attacker can aim (an attacker that puts its ``delta`` at the typical one, in a round whose honest changes
      all moved away from it, would otherwise have the honest part rejected).

    Returns the part (0 for ``first``, 1 for the rest), its side (``"above"`` or ``"below"``) and the typical
    score, or None.

    Measured, and failed (docs/results/gpu-paper): at 40% attackers the recent bank's median lies between the
    kinds (their entries pull it), so in a round the attackers hold, the honest part can be the further one; on
    the paper-scale testbed that happened without an adaptive attacker, and the round kept attackers only.

    >>> first = np.array([True, True, False, False, False])
    >>> deviation_part(np.array([0.0, 0.0, 2.1, 3.0, 2.5]), first, reference=np.array([0.0, 2.0, 2.2, 2.8, 3.1]))
    (0, 'below', 2.2)
    >>> deviation_part(np.array([0.0, 2.5, 2.1, 3.0, 2.5]), first, np.array([2.0, 2.2])) is None   # they overlap
    True
    >>> deviation_part(np.array([2.0, 2.1, 9.0, 9.5, 8.0]), first, np.array([2.0, 2.2])) is None   # the larger part
    True
    """
    reference = reference[np.isfinite(reference)]
    if not reference.size or first.all() or not first.any() or 2 * int(first.sum()) == first.size:
        return None
    typical = float(np.median(reference))
    parts = (scores[first], scores[~first])
    if parts[0].min() > parts[1].max():
        side = ("above", "below")
    elif parts[0].max() < parts[1].min():
        side = ("below", "above")
    else:
        return None
    with np.errstate(divide="ignore"):
        distance = [abs(float(np.median(np.log(part))) - np.log(typical)) if typical > 0 else 0.0 for part in parts]
    far = 0 if distance[0] > distance[1] else 1
    if distance[0] == distance[1] or parts[far].size > parts[1 - far].size:
        return None
    return far, side[far], typical


def cut_effect(cosines: np.ndarray, first: np.ndarray) -> tuple[float, float]:
    """A cut's gap in spreads, and the spread: ``(within - across) / s``, where ``within`` and ``across`` are the
    median pair cosines within ``first`` and between it and the rest, and ``s`` the robust spread (1.4826 times
    the median absolute deviation) of the pair cosines around their own group's median (pairs within ``first``,
    within the rest, across; a group of one pair has no spread and is left out). Medians, because the attackers
    choose their own pairs: an attacker that leans towards one honest client makes one across pair large, which
    would widen a standard deviation (``cut_blend`` in the simulator's attacks) but moves a median of many pairs
    little. Infinite when the spread is zero.

    >>> c = np.array([[1.0, 0.9, 0.0, 0.1], [0.9, 1.0, 0.1, 0.2], [0.0, 0.1, 1.0, 0.5], [0.1, 0.2, 0.5, 1.0]])
    >>> [round(float(x), 3) for x in cut_effect(c, np.array([True, True, False, False]))]
    [10.792, 0.074]
    """
    n = cosines.shape[0]
    upper = np.triu_indices(n, 1)
    pairs = cosines[upper]
    left, right = first[upper[0]], first[upper[1]]
    groups = [pairs[mask] for mask in (left & right, ~left & ~right, left != right) if mask.sum() > 1]
    residuals = np.concatenate([group - np.median(group) for group in groups])  # a lone pair: no spread to read
    spread = 1.4826 * float(np.median(np.abs(residuals)))
    gap = float(np.median(pairs[left & right]) - np.median(pairs[left != right]))
    return (gap / spread if spread > 0 else float("inf")), spread


def _null_cosines(rng: np.random.Generator, n: int, mean: float, spread: float) -> np.ndarray:
    """Cosines of n exchangeable unit vectors: ``x_i = sqrt(m) c + sqrt(1 - m) e_i`` with ``m = max(mean, 0)``,
    a shared unit direction c and independent isotropic unit vectors e_i orthogonal to it in
    ``d = (1 - m)^2 / spread^2`` dimensions, so that ``cos(x_i, x_j) = m + (1 - m) cos(e_i, e_j)`` has mean m
    and spread ``(1 - m) / sqrt(d) = spread``. The e_i's Gram matrix is drawn directly (Bartlett's decomposition
    of a Wishart matrix), without drawing d-dimensional vectors."""
    m = max(mean, 0.0)
    d = int(round(min(max((1.0 - m) ** 2 / max(spread, 1e-6) ** 2, 1.0), 1e12)))  # spread under 1e-6: nil noise
    if d <= n:
        e = rng.standard_normal((n, d))
        gram = e @ e.T
    else:
        lower = np.tril(rng.standard_normal((n, n)), -1)
        lower[np.diag_indices(n)] = np.sqrt(rng.chisquare(d - np.arange(n)))
        gram = lower @ lower.T
    norms = np.sqrt(np.diag(gram))
    noise = gram / np.outer(norms, norms)
    return m + (1.0 - m) * noise


class CohortGraph:
    """Signed, decaying co-membership counts between client ids (see the module docstring).

    Immutable: :meth:`updated` and :meth:`restricted` return new graphs, so a round stages its change and the
    screener commits it with the bank.
    """

    def __init__(self, ids: Sequence[ClientId] = (), weights: np.ndarray | None = None):
        self.ids: tuple[ClientId, ...] = tuple(ids)
        self.weights = np.zeros((len(self.ids), len(self.ids))) if weights is None else weights
        if self.weights.shape != (len(self.ids), len(self.ids)):
            raise ValueError(f"cohort weights of shape {self.weights.shape} for {len(self.ids)} ids")
        self._index = {client_id: i for i, client_id in enumerate(self.ids)}
        if len(self._index) != len(self.ids):
            raise ValueError("duplicate ids in the cohort graph")

    def __len__(self) -> int:
        return len(self.ids)

    def updated(
        self, ids: Sequence[ClientId], first: np.ndarray | None, decay: float, strength: float | np.ndarray = 1.0
    ) -> CohortGraph:
        """The graph after a round: old weights times ``decay``, then +``strength``/-``strength`` between the
        round's clients by ``first`` (their part; None for a round that did not split: nothing is added).
        ``strength`` is one number or an (N, N) array, one per pair of the round's clients."""
        new = [client_id for client_id in dict.fromkeys(ids) if client_id not in self._index]
        size = len(self.ids) + len(new)
        weights = np.zeros((size, size))
        weights[: len(self.ids), : len(self.ids)] = self.weights * decay
        graph = CohortGraph(self.ids + tuple(new), weights)
        if first is not None:
            rows = np.array([graph._index[client_id] for client_id in ids])
            signs = np.where(first[:, None] == first[None, :], 1.0, -1.0)
            np.fill_diagonal(signs, 0.0)
            weights[np.ix_(rows, rows)] += strength * signs
        return graph

    def restricted(self, ids: Sequence[ClientId]) -> CohortGraph:
        """The graph over ``ids`` in that order (an id it does not hold gets no edges)."""
        ids = tuple(ids)
        known = np.array([client_id in self._index for client_id in ids], dtype=bool)
        rows = np.array([self._index[client_id] for client_id, ok in zip(ids, known) if ok], dtype=int)
        weights = np.zeros((len(ids), len(ids)))
        weights[np.ix_(known, known)] = self.weights[np.ix_(rows, rows)]
        return CohortGraph(ids, weights)

    def sides(self, min_balance: float = 0.0) -> dict[ClientId, int]:
        """+1 for ids in the majority cohort, -1 in the minority, 0 unplaced (no edge, or outside the leading
        component). A side is the majority cohort only when it holds more than half of *all* the graph's ids
        (the bank's): ids are placed only by the rounds that split, which an attacker can choose (apart only
        where it holds the round), so a side that merely outnumbers the other among placed ids proves nothing.
        Without such a side every id is 0, and so it is where the split's :meth:`balance` is below
        ``min_balance`` (``FedLNS(cohort_balance=...)``)."""
        unplaced = dict.fromkeys(self.ids, 0)
        if not len(self.ids) or not self.weights.any():
            return unplaced
        lead = _leading_vector(self.weights)
        reached = np.abs(lead) > 1e-9 * np.abs(lead).max()
        side = np.where(reached, np.sign(lead), 0.0)
        if 2 * int((side < 0).sum()) > len(self.ids):
            side = -side
        elif not 2 * int((side > 0).sum()) > len(self.ids):
            return unplaced
        if min_balance > 0 and self.balance(side) < min_balance:
            return unplaced
        return {client_id: int(s) for client_id, s in zip(self.ids, side)}

    def balance(self, side: np.ndarray) -> float:
        """How far the graph's edges agree with a split of its ids (``side``: +1, -1, or 0 for an unplaced id):
        ``sum w_ij s_i s_j / sum |w_ij|`` over the pairs of placed ids, the share of edge weight that agrees (a
        positive edge within a side, a negative one across) less the share that does not; 1 for a graph of two
        groups that every cut set apart, nan without an edge between placed ids.

        Two kinds of clients that the rounds' cuts keep apart make a balanced graph (target corruption in the LoRA
        scenario: 1.00 in every round). Cuts that fall anywhere make an unbalanced one, whose split says nothing of
        who is honest: the weak cuts of honest clients alone (0.53-0.63 without attackers, GPT in the LoRA
        scenario) or cuts an attacker sets across the honest clients (``minority_flip``: 0.47-0.67).

        >>> graph = CohortGraph([1, 2, 3, 4], np.array([[0, 1, -1, -1], [1, 0, -1, -1], [-1, -1, 0, 1], [-1, -1, 1, 0.]]))
        >>> graph.balance(np.array([1, 1, -1, -1])), graph.balance(np.array([1, -1, 1, -1]))
        (1.0, -0.3333333333333333)
        """
        side = np.asarray(side, dtype=float)
        placed = np.outer(side != 0, side != 0)
        total = float(np.abs(self.weights[placed]).sum())
        return float((self.weights * np.outer(side, side))[placed].sum()) / total if total > 0 else float("nan")


def voted_out(votes: Sequence[int], sizes: Sequence[int], margin: float = 0.0) -> int | None:
    """Which of a cut's two parts the vote rejects: the one with the lower vote (the first on a tie), where that
    vote is negative and at most ``-margin`` times the part's size (``FedLNS(cohort_margin=...)``); None where
    neither is.

    >>> voted_out([-1, 2], [8, 2]), voted_out([-1, 2], [8, 2], margin=0.5), voted_out([-3, 3], [3, 7], margin=0.5)
    (0, None, 0)
    """
    lower = 0 if votes[0] <= votes[1] else 1
    return lower if votes[lower] < 0 and votes[lower] <= -margin * sizes[lower] else None


def _leading_vector(weights: np.ndarray) -> np.ndarray:
    """The eigenvector of the largest eigenvalue of a symmetric matrix."""
    if weights.shape[0] <= _DENSE_EIGEN_LIMIT:
        return np.linalg.eigh(weights)[1][:, -1]
    from scipy.sparse.linalg import eigsh

    start = np.ones(weights.shape[0]) / np.sqrt(weights.shape[0])
    return eigsh(weights, k=1, which="LA", v0=start)[1][:, 0]


@dataclass(frozen=True)
class CohortOutcome:
    """What the cohort rule decided for the round's N clients (canonical order), and the staged graph."""

    retained: np.ndarray  # (N,) bool
    reasons: tuple[str, ...]  # (N,) "" for a retained client
    support: np.ndarray  # (N,) mean cosine to the kept part's other clients (nan alone)
    graph: CohortGraph
    loud_threshold: float | None
    to_support: bool = False  # undecided="support" and the round split with no cohort holding most of the bank's ids


def contested(cut: RoundParts, n: int) -> bool:
    """``cohort_undecided="hold_contested"``: whether a split round's coherent part could win it on its own, its
    core agreeing at least ``STRONG_CUT`` (mean cosine within) and holding at least half of the round's ``n``
    clients.

    Such a round, while no cohort of the history holds more than half of the bank's ids, is what an attacker makes
    that is apart only in the rounds it holds (``majority_only``): the support rule would keep its part, the
    coherent one. Honest clients that the tree cuts into a part agree weakly (cores of 0.10-0.15 in the LoRA
    scenario, ``docs/results/cohort-vote``), so a clean round of one population is rarely contested.

    >>> cut = RoundParts(np.array([True] * 5 + [False] * 5), within=0.7, across=-0.1, apart=True)
    >>> contested(cut, 10), contested(RoundParts(cut.first, 0.3, -0.1, True), 10)
    (True, False)
    """
    return cut.within >= STRONG_CUT and 2 * int(cut.first.sum()) >= n


def history_agreement(bank_sketches: np.ndarray, stamps: np.ndarray, recent: int) -> float:
    """``cohort_undecided="adaptive"``: the median cosine between the ``recent`` bank entries' update sketches of
    different rounds, those of the round being screened left out (the latest stamp), so a round cannot steer it;
    nan without two earlier rounds among them.

    Where honest updates share a direction from round to round (a model trained from scratch), the support rule,
    which compares a round with the recent bank, decides the rounds the history cannot; where they do not (LoRA
    adapters: the median is near 0, chance for a sketch), the only coherent group it finds may be the attackers.

    >>> rng = np.random.default_rng(0)
    >>> shared = rng.normal(size=64)
    >>> sketches = shared + rng.normal(size=(30, 64)); stamps = np.repeat(np.arange(3.0), 10)
    >>> round(history_agreement(sketches, stamps, 30), 1), round(history_agreement(sketches - shared, stamps, 30), 1)
    (0.4, 0.0)
    """
    rows = recent_rows(stamps, recent)
    rows = rows[stamps[rows] < stamps.max()]
    units = _unit(bank_sketches[rows])
    other_round = stamps[rows][:, None] != stamps[rows][None, :]
    if not other_round.any():
        return float("nan")
    return float(np.median((units @ units.T)[other_round]))


def pair_median(cosines: np.ndarray) -> float:
    """The median of a round's pair cosines (the off-diagonal entries of its (N, N) cosine matrix)."""
    return float(np.median(cosines[~np.eye(len(cosines), dtype=bool)]))


def edge_strength(cut: RoundParts, weight: str, cosines: np.ndarray | None = None) -> float | np.ndarray:
    """What a split round's edges weigh in the cohort graph: 1 (``weight="unit"``), or the cut's core mean cosine
    within clipped to [0, 1] (``"coherence"``), or (``"agreeing"``) 1 for a strong cut (core mean cosine within at
    least ``STRONG_CUT``) and, for a weak one, per pair of the round's clients (an (N, N) array from the round's
    ``cosines``): 1 where the pair's own cosine agrees with the cut (the two in the same part and their cosine
    above the median of the round's pairs, or in different parts and below it), else 0.

    Why ``"agreeing"``: a weak cut is what the tree makes of honest updates that agree little, a small honest core
    against the rest, attackers included; taken whole, its +1 joins the attackers with the honest clients in the
    rest and its -1 sets honest clients against each other, until the graph splits the honest ids
    (``weak_core``). Read pair by pair, the same round's cosines say which of those edges hold.

    Examples
    --------
    >>> cut = RoundParts(np.array([True, True, False]), within=0.8, across=0.1, apart=True)
    >>> edge_strength(cut, "unit"), edge_strength(cut, "coherence")
    (1.0, 0.8)
    >>> weak = RoundParts(np.array([True, True, False, False]), within=0.2, across=0.0, apart=True)
    >>> cosines = np.array([[1, .2, -.1, .3], [.2, 1, .0, -.1], [-.1, .0, 1, -.2], [.3, -.1, -.2, 1]])
    >>> edge_strength(weak, "agreeing", cosines)  # the round's median pair cosine is -0.05
    array([[0., 1., 1., 0.],
           [1., 0., 0., 1.],
           [1., 0., 0., 0.],
           [0., 1., 0., 0.]])
    """
    if weight == "unit":
        return 1.0
    if weight == "coherence":
        return float(np.clip(cut.within, 0.0, 1.0))
    if weight == "agreeing":
        if cut.within >= STRONG_CUT:
            return 1.0
        if cosines is None:
            raise ValueError("the agreeing weight reads the round's cosines")
        centered = cosines - pair_median(cosines)
        same = cut.first[:, None] == cut.first[None, :]
        return (np.where(same, centered > 0, centered < 0) & ~np.eye(len(cosines), dtype=bool)).astype(float)
    raise ValueError(f"weight must be 'unit', 'coherence' or 'agreeing', got {weight!r}")


def cohort_rule(
    scores: np.ndarray,
    sketches: np.ndarray,
    ids: Sequence[ClientId],
    graph: CohortGraph,
    stamps: np.ndarray,
    bank_scores: np.ndarray,
    *,
    recent: int,
    separation: float,
    loud_separation: float,
    decay: float,
    undecided: str = "keep",
    dimension: int | None = None,
    cohort_cut: str = "tree",
    vote: str = "round",
    weight: str = "unit",
    margin: float = 0.0,
    balance: float = 0.0,
    contested_round: str = "hold",
    strong_minority: str = "support",
    open_round_rule: str = "support",
    decide: bool = True,
    bank_sketches: np.ndarray | None = None,
    change: str = "normalization change",
) -> CohortOutcome:
    """Decide a round by its parts and the cohort graph (``decide=False``: only stage the graph, keep everyone).

    Parameters
    ----------
    scores : (N,)
        The round's deviation scores ``delta`` (eq. ``client_score``).
    sketches : (N, k)
        The round's update sketches.
    ids : N client ids
        Whose rows they are.
    graph : CohortGraph
        The graph before this round.
    undecided : {"keep", "hold", "deviation", "support", "hold_contested", "adaptive"}
        A round that falls into parts apart while no cohort holds more than half of the bank's ids: ``"keep"``
        everyone (the default), or ``"hold"``, aggregate nobody (an attacker apart only in the rounds it holds,
        ``majority_only``, is otherwise kept there), or ``"deviation"``, reject the part the deviation score tells
        apart (:func:`deviation_part`) and keep everyone where it tells none. ``"support"`` is decided by the
        screener, which hands such a round (``CohortOutcome.to_support``) to the support rule; here it keeps
        everyone. ``"hold_contested"``: as ``"support"``, except that such a round is held where its coherent
        part could win it on its own (:func:`contested`), and so is a round whose two parts both vote negative
        (under the other settings the lower part is rejected and the other, outside the majority too, kept).
        ``"adaptive"``: ``"support"`` where the history's updates agree across rounds (:func:`history_agreement`
        of ``bank_sketches`` at least ``CONSISTENT_HISTORY``), else ``"hold_contested"``.
    cohort_cut : {"tree", "significant", "confirmed", "centered"}, default="tree"
        ``FedLNS(cohort_cut=...)``: every cut the tree finds that is apart, only those wider than chance
        (``"significant"``, :func:`round_parts`), or the tree's and, in a round whose parts are not apart, the group
        the history singles out (``"confirmed"``, :func:`confirmed_cut`; it adds no edges to the graph: only cuts
        apart by the updates do); ``"centered"``: as ``"confirmed"``, and in a round whose parts are not apart,
        first the cut of the updates centred at the round's median (:func:`centered_parts`; a cut by the updates,
        so it adds its edges and votes as a cut of the tree does).
    vote : {"round", "history", "strong", "placed", "settled"}, default="round"
        Read the members' sides from the graph with this round's edges (``"round"``), or from the graph before
        them, placing with them only the ids it leaves unplaced (``"history"``), or ``"history"`` for a cut whose
        core agrees less than ``STRONG_CUT`` and ``"round"`` otherwise (``"strong"``), or as ``"strong"`` except
        that a weak cut places nobody: its ids the history leaves unplaced vote 0 (``"placed"``), or ``"placed"``
        where the graph before the round holds a majority cohort and ``"round"`` where it does not yet
        (``"settled"``; ``FedLNS(cohort_vote=...)``).
    weight : {"unit", "coherence", "agreeing"}, default="unit"
        What the cut's edges weigh (``FedLNS(cohort_weight=...)``): 1, or the mean cosine within the cut's core
        clipped to [0, 1], or, for a weak cut, 1 only between two clients whose own cosine agrees with the cut
        (:func:`edge_strength`).
    margin : float in [0, 1], default=0.0
        A part is rejected only where its vote is at most ``-margin`` times its size (``FedLNS(cohort_margin=...)``):
        0 rejects the lower part on any negative vote, 1 only a part the history places wholly in the minority.
    balance : float in [0, 1], default=0.0
        The graph's split places nobody unless its :meth:`CohortGraph.balance` is at least this
        (``FedLNS(cohort_balance=...)``): a round under a graph whose cuts fell anywhere is decided as one under a
        history without a majority cohort (``undecided``).
    contested_round : {"hold", "reject"}, default="hold"
        What a round ``undecided="hold_contested"`` finds contested (:func:`contested`) does: aggregate nobody, or
        reject its coherent part and keep the other (``FedLNS(cohort_contested=...)``).
    strong_minority : {"support", "reject"}, default="support"
        What a round ``undecided="hold_contested"`` hands to the support rule does where its coherent part agrees at
        least ``STRONG_CUT`` but holds less than half of it: go to the support rule, or reject that part
        (``FedLNS(cohort_strong_minority=...)``).
    open_round_rule : {"support", "keep"}, default="support"
        What a round ``undecided="hold_contested"`` hands to the support rule does otherwise: go to it, or be kept
        whole (``FedLNS(cohort_open=...)``).
    bank_sketches : (B, k), optional
        The bank's update sketches (rows as ``stamps``); ``undecided="adaptive"`` needs them.
    dimension : int, optional
        How many independent numbers a sketch holds, which sets the chance level of cosines (:func:`round_parts`).
        Default: the median count of nonzero sketch entries in the round, the sketch's length for an update of
        more coordinates than it has, fewer where only a few coordinates moved (a small adapter in a frozen
        model: its sketch is zero wherever no moved coordinate folds).
    change : str, default="normalization change"
        What the scores measure, as the reasons name it (``"LoRA change"`` for the LoRA signature).
    """
    n = len(ids)
    units = _unit(sketches)
    cosines = units @ units.T
    if dimension is None:
        dimension = max(int(np.median(np.count_nonzero(sketches, axis=1))), 1)
    parts = round_parts(cosines, separation=separation, dimension=dimension, significant=cohort_cut == "significant")
    cut = parts if parts is not None and parts.apart else None
    recent_scores = bank_scores[recent_rows(stamps, recent)]  # the loud test's reference, and the deviation's
    centered = False
    if cut is None and cohort_cut == "centered" and parts is not None:
        centered_cut = centered_parts(sketches, separation=separation, dimension=dimension)
        if centered_cut is not None and centered_cut.apart:
            cut, centered = centered_cut, True
    strength = 1.0 if cut is None else edge_strength(cut, weight, cosines)
    before, graph = graph, graph.updated(ids, None if cut is None else cut.first, decay, strength)
    reasons = [""] * n
    kept = np.ones(n, dtype=bool)
    open_round = False
    held = ""
    drifting = ""  # undecided="adaptive" in a history whose updates do not agree across rounds: why
    rejected_part: np.ndarray | None = None
    if cut is not None and decide and undecided == "adaptive":
        if bank_sketches is None:
            raise ValueError('cohort_undecided="adaptive" needs the bank\'s sketches')
        agreement = history_agreement(bank_sketches, stamps, recent)
        consistent = agreement >= CONSISTENT_HISTORY
        undecided = "support" if consistent else "hold_contested"
        if not consistent:
            drifting = f", in a history whose updates agree little across rounds (median cosine {agreement:.3g})"
    if cut is not None and decide:
        side = graph.sides(balance)
        if vote == "history" or (vote in ("strong", "placed", "settled") and cut.within < STRONG_CUT):
            # The graph before the round's edges, over the same ids (the round's new ones without edges), so with
            # the same majority bar; the round's edges place only the ids it leaves unplaced ("placed": nobody;
            # "settled": nobody once the history holds a majority cohort, before that as "round").
            history = before.updated(ids, None, decay).sides(balance)
            if vote == "settled" and not any(history.values()):
                pass  # the history places nobody yet: the round's own edges vote, as under "round"
            elif vote in ("placed", "settled"):
                side = {client_id: history[client_id] for client_id in side}
            else:
                side = {client_id: history[client_id] or s for client_id, s in side.items()}
        open_round = not any(side.values())  # no cohort holds a majority of the bank's ids: every vote is 0
        members = [cut.first, ~cut.first]
        votes = [sum(side[client_id] for client_id, m in zip(ids, mask) if m) for mask in members]
        out = voted_out(votes, [int(mask.sum()) for mask in members], margin)
        where = CENTERED_REASON if centered else "in the part of the round apart from the rest"
        # undecided="hold_contested": an open round whose coherent part agrees strongly, contested where it holds at
        # least half of the round (cohort_contested says what then), else a strong minority (cohort_strong_minority)
        strong_open = undecided == "hold_contested" and open_round and cut.within >= STRONG_CUT
        is_contested = strong_open and contested(cut, n)
        why = ""
        if undecided == "hold" and open_round:
            held = "no cohort of the history holds more than half of the bank's ids to tell which is honest"
        elif strong_open and (contested_round if is_contested else strong_minority) == "reject":
            rejected_part = cut.first
            why = (
                f"and the coherent one, {'' if is_contested else 'agreeing strongly and '}holding "
                f"{int(cut.first.sum())} of its {n} clients, where no cohort of the history holds more than half of "
                f"the bank's ids to tell which is honest{drifting}"
            )
        elif is_contested:
            held = (
                f"its coherent part ({int(cut.first.sum())} of {n}) holds at least half of it and no cohort of the "
                "history holds more than half of the bank's ids to tell which is honest"
            )
        elif undecided == "hold_contested" and max(votes) < 0:
            held = (
                "the history places both parts outside the population's majority cohort "
                f"(votes {votes[0]:+d} and {votes[1]:+d})"
            )
        if held:
            kept = np.zeros(n, dtype=bool)
            for i in range(n):
                reasons[i] = (
                    f"held: the round falls into parts apart (mean cosine {cut.across:.3g} across, "
                    f"{cut.within:.3g} within) and {held}{drifting}"
                )
        elif undecided == "deviation" and open_round:
            told = deviation_part(scores, cut.first, recent_scores)
            if told is not None:
                far, above_or_below, typical = told
                rejected_part = members[far]
                why = (
                    f"whose {change}s all lie {above_or_below} the other part's and further from the "
                    f"bank's typical delta {typical:.3g}, in a round no cohort of the history can decide"
                )
        elif out is not None:
            rejected_part = members[out]
            why = (
                "whose clients' history places them outside the population's majority cohort "
                f"(vote {votes[out]:+d} of {int(members[out].sum())})"
            )
        if rejected_part is not None:
            kept = ~rejected_part
            for i in np.flatnonzero(rejected_part).tolist():
                reasons[i] = f"{where} (mean cosine {cut.across:.3g} across, {cut.within:.3g} within) {why}"
    if cut is None and cohort_cut in HISTORY_CUTS and decide and parts is not None:
        history = graph.sides(balance)  # the round added no edges: the history before it
        confirmed = confirmed_cut(cosines, [history[client_id] for client_id in ids], dimension)
        if confirmed is not None:
            first, within, across = confirmed
            kept = ~first
            minority = sum(history[client_id] < 0 for client_id, m in zip(ids, first) if m)
            for i in np.flatnonzero(first).tolist():
                reasons[i] = (
                    f"{CONFIRMED_REASON} (mean cosine {within:.3g}) than with the rest "
                    f"({across:.3g}), not apart, whose clients the history places outside the population's majority "
                    f"cohort ({minority} of {int(first.sum())} in the minority) and nobody else in the minority"
                )
    support = np.full(n, np.nan)
    for i in range(n):
        others = kept.copy()
        others[i] = False
        if others.any():
            support[i] = float(cosines[i, others].mean())
    loud_threshold = None
    if decide:
        loud_threshold, _ = loud_reasons(scores, recent_scores, loud_separation, reasons, change)
    retained = np.array([not reason for reason in reasons], dtype=bool)
    # an open round nothing above decided goes to the support rule, or with open_round_rule="keep" is kept whole
    fallback = undecided == "support" or (undecided == "hold_contested" and open_round_rule == "support")
    to_support = open_round and fallback and not held and rejected_part is None
    return CohortOutcome(retained, tuple(reasons), support, graph, loud_threshold, to_support)
