"""Choosing the activation threshold: the paper's appendix ``app:min_bank_probability`` as a planner.

Screening compares each round against the bank's coordinate-wise median, which stays benign while
malicious ids are fewer than half of the bank (the median's 50% breakdown point). Under uniform
participation a bank of ``b`` distinct ids is a uniform random subset of the ``K`` clients, so its
number of malicious ids is hypergeometric (eq. ``hypergeom_pmf``). The planner finds the smallest bank
size at which the exact probability of a malicious-majority bank (eq. ``bad_bank_event``) is at most a
chosen risk, and how many rounds the bank needs to grow that large (eq. ``round_to_reach_fraction``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.stats import hypergeom

_ROUNDING = 1e-9
DEFAULT_COVERAGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class CoverageRow(NamedTuple):
    """One line of :meth:`ActivationPlan.table`."""

    coverage: float  # rho, the bank size as a fraction of K
    bank_size: int  # ceil(rho * K)
    risk: float  # Pr(malicious-majority bank) at exactly this size
    expected_rounds: int | None  # rounds until the expected bank reaches this size; None: never


@dataclass(frozen=True)
class ActivationPlan:
    """An activation threshold for a federation, with the risk it carries and when it is reached.

    Made by :func:`plan_activation`; every figure assumes uniform random participation.

    Attributes
    ----------
    num_clients : int
        Population size K.
    malicious_fraction : float
        The assumed upper bound alpha on the malicious fraction.
    participation : float
        Per-round participation rate q (clients sampled per round / K).
    max_risk : float
        The accepted probability eta of a malicious-majority bank.
    n_malicious : int
        ``ceil(alpha * K)`` (ignoring floating-point excess below 1e-9), the malicious ids the
        probabilities are computed for.
    threshold : int
        Smallest bank size M such that the exact probability of a malicious-majority bank is at most
        ``max_risk`` at every bank size from M up to K. Use it as ``FedLNS(activation_threshold=...)``.
    risk : float
        That probability at ``threshold``.
    coverage : float
        ``threshold / K``.
    threshold_kl : int
        The paper's KL guideline ``ceil(log(1/eta) / D(1/2 || alpha))`` (eq. ``mmin_exact_guideline``);
        not capped at K.
    threshold_simple : int
        The paper's simpler, more conservative guideline ``ceil(log(1/eta) / (2 (1/2 - alpha)^2))``
        (eq. ``mmin_simple_guideline``); not capped at K.
    expected_rounds : int or None
        Rounds until the expected bank size ``K (1 - (1 - q)^r)`` (eq. ``expected_bank_size``) reaches
        ``threshold``, i.e. ``ceil(log(1 - threshold/K) / log(1 - q))`` (eq. ``round_to_reach_fraction``),
        at least 1. None when ``threshold == K`` and ``q < 1``: the expected bank never holds everyone.
    """

    num_clients: int
    malicious_fraction: float
    participation: float
    max_risk: float
    n_malicious: int
    threshold: int
    risk: float
    coverage: float
    threshold_kl: int
    threshold_simple: int
    expected_rounds: int | None

    def risk_at(self, bank_size: int) -> float:
        """Exact probability of a malicious-majority bank of ``bank_size`` ids (eq. ``bad_bank_event``)."""
        _check_int("bank_size", bank_size, 1)
        if bank_size > self.num_clients:
            raise ValueError(f"bank_size must be at most num_clients={self.num_clients}, got {bank_size}")
        return float(_majority_risk(self.num_clients, self.n_malicious, np.array([bank_size]))[0])

    def rounds_to(self, bank_size: int) -> int | None:
        """Rounds until the expected bank reaches ``bank_size`` ids (eq. ``round_to_reach_fraction``)."""
        _check_int("bank_size", bank_size, 0)
        if bank_size > self.num_clients:
            raise ValueError(f"bank_size must be at most num_clients={self.num_clients}, got {bank_size}")
        return _rounds_to_reach(bank_size / self.num_clients, self.participation)

    def table(self, coverages: Sequence[float] = DEFAULT_COVERAGES) -> list[CoverageRow]:
        """Risk and expected rounds at each bank coverage rho (bank size ``ceil(rho K)``, at least 1)."""
        rows: list[CoverageRow] = []
        for coverage in coverages:
            if not (isinstance(coverage, numbers.Real) and 0 < coverage <= 1):
                raise ValueError(f"each coverage must be in (0, 1], got {coverage!r}")
            bank_size = max(1, math.ceil(coverage * self.num_clients - _ROUNDING))
            rows.append(CoverageRow(float(coverage), bank_size, self.risk_at(bank_size), self.rounds_to(bank_size)))
        return rows

    def describe(self) -> str:
        """The plan in a few lines of text."""
        rounds = "never (in expectation)" if self.expected_rounds is None else str(self.expected_rounds)
        return "\n".join(
            [
                f"K={self.num_clients} clients, {self.participation:g} of them per round "
                f"({self.participation * self.num_clients:g}), at most {self.malicious_fraction:g} malicious "
                f"({self.n_malicious} ids); accepted risk {self.max_risk:g}",
                f"activation_threshold = {self.threshold} ({self.coverage:.0%} coverage): "
                f"P(malicious-majority bank) = {self.risk:.3g} there, <= {self.max_risk:g} at every larger size",
                f"expected rounds to reach it: {rounds}",
                f"paper's guidelines: KL {self.threshold_kl}, simple {self.threshold_simple}",
            ]
        )


def plan_activation(
    num_clients: int, malicious_fraction: float, participation: float, max_risk: float = 0.01
) -> ActivationPlan:
    """Plan the activation threshold from the paper's hypergeometric model (``app:min_bank_probability``).

    Parameters
    ----------
    num_clients : int
        Population size K (at least 1).
    malicious_fraction : float in [0, 0.5)
        Assumed upper bound alpha on the fraction of malicious clients; ``ceil(alpha K)`` ids attack.
    participation : float in (0, 1]
        Per-round participation rate q: clients sampled per round divided by K.
    max_risk : float in (0, 1), default=0.01
        Accepted probability eta that malicious ids make up at least half of the bank.

    Returns
    -------
    ActivationPlan

    Raises
    ------
    ValueError
        For impossible inputs, saying what to change: alpha >= 0.5, ``ceil(alpha K) >= K/2`` (then even
        the full bank has a malicious half and no bank size meets any risk below 1), K < 1, q outside
        (0, 1], ``max_risk`` outside (0, 1).

    Notes
    -----
    A bank of b ids holds ``M ~ Hypergeometric(K, ceil(alpha K), b)`` malicious ids (eq.
    ``hypergeom_pmf``). The bad event is the paper's eq. ``bad_bank_event``, ``M >= b/2``: malicious ids
    are *at least* half of the bank, so a tie counts as bad (the median of an even bank split in two
    halves averages a malicious and a benign value). Its probability is not monotone in b (an odd bank
    needs one more malicious id than the even bank below it), hence the condition at every size from the
    threshold up to K. Sizes above ``log(1/eta) / D(1/2 || ceil(alpha K)/K)`` meet the risk by the
    Chernoff bound eq. ``bad_bank_kl_bound`` (it holds for sampling without replacement, Hoeffding 1963),
    and sizes above ``2 ceil(alpha K)`` have risk zero, so only the sizes below both are computed exactly
    (with ``scipy.stats.hypergeom``).

    The guidelines eqs. ``mmin_exact_guideline`` and ``mmin_simple_guideline`` use alpha itself; they
    bound the risk at one bank size and are usually larger than the exact threshold.

    Examples
    --------
    The paper's setting, K=200 clients, 10% per round, up to 40% malicious:

    >>> plan = plan_activation(200, 0.4, 0.1)
    >>> plan.threshold, round(plan.risk, 4), plan.threshold_kl, plan.threshold_simple, plan.expected_rounds
    (85, 0.0066, 226, 231, 6)
    >>> [(row.coverage, row.expected_rounds) for row in plan.table([0.25, 0.5, 0.75])]
    [(0.25, 3), (0.5, 7), (0.75, 14)]

    K=20 with 4 per round and 5 attackers: a bank of 11 can no longer have a malicious half:

    >>> plan = plan_activation(20, 0.25, 0.2)
    >>> plan.threshold, plan.risk, plan.risk_at(10) > 0.01, plan.expected_rounds
    (11, 0.0, True, 4)
    """
    _check_int("num_clients", num_clients, 1)
    _check_fraction("malicious_fraction", malicious_fraction)
    _check_fraction("participation", participation)
    _check_fraction("max_risk", max_risk)
    if malicious_fraction < 0 or malicious_fraction >= 0.5:
        raise ValueError(
            f"malicious_fraction must be in [0, 0.5), got {malicious_fraction!r}: at half or more "
            "the bank median can be taken over and no activation threshold is safe"
        )
    if not 0 < participation <= 1:
        raise ValueError(f"participation must be in (0, 1] (clients per round / num_clients), got {participation!r}")
    if not 0 < max_risk < 1:
        raise ValueError(f"max_risk must be in (0, 1), got {max_risk!r}")
    # 0.07 * 100 is 7.000000000000001 in floating point: the user means 7 malicious ids, not 8
    n_malicious = math.ceil(malicious_fraction * num_clients - _ROUNDING)
    if 2 * n_malicious >= num_clients:
        raise ValueError(
            f"no bank size meets max_risk={max_risk:g}: with {num_clients} clients, ceil({malicious_fraction:g} * "
            f"{num_clients}) = {n_malicious} malicious ids are at least half of the population, so even the "
            f"full bank has a malicious half; lower malicious_fraction to at most "
            f"{_largest_safe_fraction(num_clients):.4g} or plan for more clients"
        )

    # Sizes above `cutoff` meet max_risk for sure (Chernoff bound, or no malicious half possible).
    fraction = n_malicious / num_clients
    cutoff = min(num_clients, 2 * n_malicious)
    if fraction > 0:
        cutoff = min(cutoff, math.ceil(math.log(1 / max_risk) / _kl_half(fraction)))
    sizes = np.arange(1, cutoff + 1)
    risks = _majority_risk(num_clients, n_malicious, sizes)
    failing = np.flatnonzero(risks > max_risk)
    threshold = int(sizes[failing[-1]]) + 1 if failing.size else 1
    kl = _kl_half(malicious_fraction)
    threshold_kl = 0 if kl == math.inf else math.ceil(math.log(1 / max_risk) / kl)
    threshold_simple = math.ceil(math.log(1 / max_risk) / (2 * (0.5 - malicious_fraction) ** 2))
    return ActivationPlan(
        num_clients=int(num_clients),
        malicious_fraction=float(malicious_fraction),
        participation=float(participation),
        max_risk=float(max_risk),
        n_malicious=n_malicious,
        threshold=threshold,
        risk=float(_majority_risk(num_clients, n_malicious, np.array([threshold]))[0]),
        coverage=threshold / num_clients,
        threshold_kl=threshold_kl,
        threshold_simple=threshold_simple,
        expected_rounds=_rounds_to_reach(threshold / num_clients, participation),
    )


def _majority_risk(num_clients: int, n_malicious: int, bank_sizes: np.ndarray) -> np.ndarray:
    """Pr(M >= b/2) for M ~ Hypergeometric(K, n_malicious, b), per bank size b (eqs. bad_bank_event, hypergeom_pmf)."""
    at_least = (bank_sizes + 1) // 2  # M >= b/2  <=>  M >= ceil(b/2)
    return np.clip(hypergeom.sf(at_least - 1, num_clients, n_malicious, bank_sizes), 0.0, 1.0)


def _kl_half(alpha: float) -> float:
    """Bernoulli KL divergence D(1/2 || alpha) = log(1 / (4 alpha (1 - alpha))) / 2 (eq. kl_half_alpha_compact)."""
    return math.inf if alpha == 0 else 0.5 * math.log(1 / (4 * alpha * (1 - alpha)))


def _rounds_to_reach(coverage: float, participation: float) -> int | None:
    """ceil(log(1 - rho) / log(1 - q)), at least 1 (eq. round_to_reach_fraction); None if never."""
    if coverage <= 0:
        return 0
    if participation >= 1:
        return 1
    if coverage >= 1:
        return None
    # the tolerance keeps an exact integer ratio (rho = 0.75, q = 0.5 gives 2) from rounding up
    return max(1, math.ceil(math.log1p(-coverage) / math.log1p(-participation) - _ROUNDING))


def _largest_safe_fraction(num_clients: int) -> float:
    """The largest alpha with 2 ceil(alpha K) < K, for the error message."""
    return ((num_clients - 1) // 2) / num_clients


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _check_fraction(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
