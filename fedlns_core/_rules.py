"""Retain rules for small and clean rounds, measured against the paper's rule.

``benchmarks/rule_study.py`` compares them on synthetic federations and ``docs/rules.md`` holds the
table. The winners are :class:`FedLNS`'s ``retain_rule`` options (:func:`bank_rule` maps the names); the
others stay here as the study's candidates. Every rule takes the round's bank-standardized features ``Z``
(eq. ``z_full``, shape (N, D)) and, where it needs them, the bank's own entries standardized against
the same bank reference (shape (B, D); the round's clients are among them, since the bank is refreshed
before screening), and returns which rows to keep and why the others go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ._mixture import bic_gmm_retain, fit_mixture
from ._robust import deviation_scores

_SPREAD_FLOOR = 1e-3


@dataclass(frozen=True)
class RuleOutcome:
    """Which of the round's N rows a rule keeps, and why each other row is rejected."""

    retained: np.ndarray  # (N,) bool
    reasons: tuple[str, ...]  # (N,) "" for a retained row
    n_components: int  # components of the mixture that decided (1 keeps all)
    separation: float | None = None  # gap between the groups in benign spreads, when split
    bic: dict | None = None  # BIC(c) of the round's first mixture fit, when one was made

    @property
    def rejected(self) -> np.ndarray:
        return np.flatnonzero(~self.retained)


def _outcome(retained: np.ndarray, reason: str, n_components: int, separation: float | None = None):
    reasons = tuple("" if keep else reason for keep in retained)
    return RuleOutcome(np.asarray(retained, dtype=bool), reasons, n_components, separation)


def _keep_all(n_rows: int, n_components: int = 1) -> RuleOutcome:
    return _outcome(np.ones(n_rows, dtype=bool), "", n_components)


def _two_groups(bank_scores: np.ndarray, *, random_state, reg_covar=1e-4, n_init=5, max_iter=200, solver="fast"):
    """One- and two-component 1-D mixtures of the bank's scores (B, 1): (BIC(1), BIC(2), two)."""
    fit = dict(reg_covar=reg_covar, max_iter=max_iter, random_state=random_state, solver=solver)
    one = fit_mixture(bank_scores, 1, n_init=1, **fit)
    two = fit_mixture(bank_scores, 2, n_init=n_init, **fit)
    return one.bic(bank_scores), two.bic(bank_scores), two


def _bank_groups(bank_features: np.ndarray, *, random_state, **mixture):
    """The bank's scores ``delta`` (B, 1) and their 1-D mixtures: (scores, BIC(1), BIC(2), (mean, sd) of the
    lower of the two components), or None when the scores cannot be split (fewer than two, all equal)."""
    bank_scores = deviation_scores(bank_features)[:, None]  # (B, 1)
    if bank_scores.shape[0] < 2 or np.all(bank_scores == bank_scores[0]):
        return None
    bic_one, bic_two, two = _two_groups(bank_scores, random_state=random_state, **mixture)
    low = int(np.argmin(two.means_[:, 0]))
    return bank_scores, bic_one, bic_two, (float(two.means_[low, 0]), float(np.sqrt(two.covariances_[low, 0])))


def benign_spread(bank_features: np.ndarray, *, random_state: int | None = None, **mixture) -> float:
    """Width of the bank's low-deviation group: the standard deviation of the lower component of a
    two-component mixture of the B bank scores ``delta`` (floored). A bank-wide MAD would be inflated by
    the attackers' mode (at 40% malicious it undid most true splits)."""
    groups = _bank_groups(bank_features, random_state=random_state, **mixture)
    return _SPREAD_FLOOR if groups is None else max(groups[3][1], _SPREAD_FLOOR)


def benign_reference(bank_features: np.ndarray, *, random_state: int | None = None, **mixture) -> tuple[float, float]:
    """Centre and width of the bank's benign deviation scores: the mean and standard deviation of the
    one-component fit of the B bank scores ``delta`` when BIC prefers one component, else of the lower
    of two (the attackers' mode, if the bank holds one, is left out). Width floored."""
    groups = _bank_groups(bank_features, random_state=random_state, **mixture)
    if groups is None:
        scores = deviation_scores(bank_features)
        return (float(scores[0]) if scores.size else 0.0), _SPREAD_FLOOR
    bank_scores, bic_one, bic_two, (low_mean, low_sd) = groups
    if bic_one <= bic_two:
        return float(bank_scores.mean()), max(float(bank_scores.std()), _SPREAD_FLOOR)
    return low_mean, max(low_sd, _SPREAD_FLOOR)


# ------------------------------------------------------------------------------------------ the rules
def paper_rule(features: np.ndarray, *, random_state: int | None = None, **mixture) -> RuleOutcome:
    """(a) The paper's Algorithm BICGMMRetain on Z, exactly as :meth:`FedLNS.screen` calls it."""
    scores = deviation_scores(features)  # eq. client_score
    decision = bic_gmm_retain(features, scores, random_state=random_state, **mixture)
    return _outcome(decision.labels == 0, "paper: high-deviation component", decision.n_components)


def score_rule(features: np.ndarray, *, random_state: int | None = None, **mixture) -> RuleOutcome:
    """(b) BICGMMRetain on the one-dimensional scores ``delta`` (N, 1) instead of Z (N, D)."""
    scores = deviation_scores(features)
    decision = bic_gmm_retain(scores[:, None], scores, random_state=random_state, **mixture)
    return _outcome(decision.labels == 0, "scores: high-deviation component", decision.n_components)


def bank_mixture_rule(
    features: np.ndarray,
    bank_features: np.ndarray,
    *,
    min_separation: float = 0.0,
    peel_steps: int = 1,
    random_state: int | None = None,
    **mixture,
) -> RuleOutcome:
    """(c) Judge the round against a 1-vs-2 component mixture of the bank's own scores.

    The B bank scores (hundreds of points, not the round's 2-5) choose one or two components by BIC.
    With two whose means differ by at least ``min_separation`` standard deviations of the low
    component, a client is rejected when the high component is the more probable for its score or its
    score is above that component's mean. With ``peel_steps > 1`` the bank entries of the high
    component are dropped and the mixture is fitted again (e) until BIC picks one component or the
    components are too close: an extreme decoy takes the first high component alone, moderate
    attackers the next. ``separation`` reports the first split's.
    """
    bank_scores = deviation_scores(bank_features)[:, None]  # (B, 1)
    scores = deviation_scores(features)
    rejected = np.zeros(len(scores), dtype=bool)
    first_separation = None
    for _ in range(peel_steps):
        if bank_scores.shape[0] < 2 or np.all(bank_scores == bank_scores[0]):
            break
        bic_one, bic_two, two = _two_groups(bank_scores, random_state=random_state, **mixture)
        if bic_one <= bic_two:
            break
        low, high = np.argsort(two.means_[:, 0])
        separation = float(two.means_[high, 0] - two.means_[low, 0]) / max(
            float(np.sqrt(two.covariances_[low, 0])), _SPREAD_FLOOR
        )
        if separation < min_separation:
            break
        first_separation = separation if first_separation is None else first_separation
        rejected |= (two.predict_proba(scores[:, None])[:, high] > 0.5) | (scores > two.means_[high, 0])
        bank_scores = bank_scores[two.predict(bank_scores) == low]
    if first_separation is None:
        return _keep_all(len(scores))
    return _outcome(~rejected, f"bank mixture: high component (separation {first_separation:.2g})", 2, first_separation)


def separated(outcome: RuleOutcome, features: np.ndarray, spread: float, min_separation: float) -> RuleOutcome:
    """(d) Undo a split whose groups' median scores differ by less than ``min_separation`` times
    ``spread`` (:func:`benign_spread` of the bank)."""
    if outcome.retained.all() or not outcome.retained.any():
        return outcome
    scores = deviation_scores(features)
    gap = float(np.median(scores[~outcome.retained]) - np.median(scores[outcome.retained]))
    separation = gap / spread
    if separation < min_separation:
        return _keep_all(len(scores), outcome.n_components)
    return RuleOutcome(outcome.retained, outcome.reasons, outcome.n_components, separation)


def peeled(rule: Callable[[np.ndarray], RuleOutcome], features: np.ndarray, max_steps: int = 3) -> RuleOutcome:
    """(e) Apply ``rule`` again to the rows it kept, until it rejects nothing (decoys: an extreme client
    takes the second component alone and hides moderate attackers in the first)."""
    kept = np.arange(features.shape[0])
    reasons = [""] * features.shape[0]
    n_components = 1
    for step in range(max_steps):
        if kept.size < 2:
            break
        outcome = rule(features[kept])
        if outcome.retained.all():
            break
        n_components = max(n_components, outcome.n_components)
        for row in kept[~outcome.retained]:
            reasons[row] = f"peel {step + 1}: {outcome.reasons[np.flatnonzero(kept == row)[0]]}"
        kept = kept[outcome.retained]
    retained = np.zeros(features.shape[0], dtype=bool)
    retained[kept] = True
    return RuleOutcome(retained, tuple(reasons), n_components)


def fresh_entries(ages: np.ndarray, max_age: int, minimum: int) -> np.ndarray:
    """(f) Bank entries at most ``max_age`` rounds old, or all of them when fewer than ``minimum`` are."""
    fresh = ages <= max_age
    return fresh if fresh.sum() >= minimum else np.ones_like(fresh)


def guarded_rule(
    features: np.ndarray,
    bank_features: np.ndarray,
    *,
    lone_separation: float = 3.0,
    min_separation: float = 0.0,
    random_state: int | None = None,
    **mixture,
) -> RuleOutcome:
    """(g) The paper's mixture, with the two splits it gets wrong guarded.

    * A component holding a single client (the BIC's favourite in clean and small rounds: a lone
      point fits with variance ``reg_covar``) never decides for the others. That client is rejected
      only if its score lies at least ``lone_separation`` benign widths (:func:`benign_reference`)
      above the bank's benign centre, kept otherwise; either way it is set aside and the mixture is
      fitted again to the remaining clients, so a lone point cannot hide a real group.
    * A split into two groups of two or more is the paper's decision, undone (everyone kept) when the
      groups' median scores differ by less than ``min_separation`` benign widths (0: never undone).
    """
    scores = deviation_scores(features)
    center, width = benign_reference(bank_features, random_state=random_state, solver=mixture.get("solver", "fast"))
    rejected = np.zeros(len(scores), dtype=bool)
    reasons = [""] * len(scores)
    active = np.arange(len(scores))
    n_components, bic = 1, None
    while active.size >= 2:
        decision = bic_gmm_retain(features[active], scores[active], random_state=random_state, **mixture)
        bic = decision.bic if bic is None else bic
        if decision.n_components == 1:
            break
        n_components = 2
        other = decision.labels == 1
        if min(other.sum(), (~other).sum()) == 1:
            lone = active[other] if other.sum() == 1 else active[~other]
            lone = int(lone[0])
            excess = (scores[lone] - center) / width
            if excess >= lone_separation:
                rejected[lone] = True
                reasons[lone] = f"lone client {excess:.2g} benign widths above the bank's centre"
            active = active[active != lone]
            continue
        gap = (float(np.median(scores[active][other])) - float(np.median(scores[active][~other]))) / width
        if gap >= min_separation:
            rejected[active[other]] = True
            for row in active[other]:
                reasons[row] = f"high-deviation group ({gap:.2g} benign widths apart)"
        break
    return RuleOutcome(~rejected, tuple(reasons), n_components, bic=bic)


def bank_rule(
    name: str,
    features: np.ndarray,
    bank_features: np.ndarray,
    *,
    lone_separation: float,
    min_separation: float,
    random_state: int | None = None,
    **mixture,
) -> RuleOutcome:
    """The retain rules of :class:`FedLNS` that read the bank (``retain_rule`` other than ``"paper"``)."""
    if name == "guarded":
        return guarded_rule(
            features,
            bank_features,
            lone_separation=lone_separation,
            min_separation=min_separation,
            random_state=random_state,
            **mixture,
        )
    if name == "peeled":
        spread = benign_spread(bank_features, random_state=random_state, solver=mixture.get("solver", "fast"))
        return peeled(
            lambda rows: separated(
                paper_rule(rows, random_state=random_state, **mixture), rows, spread, min_separation
            ),
            features,
        )
    if name == "bank":
        mixture.pop("components", None)  # the bank's mixture always compares one and two components
        return bank_mixture_rule(
            features, bank_features, min_separation=min_separation, random_state=random_state, **mixture
        )
    raise ValueError(f"unknown retain rule {name!r}")
