"""The activation planner (appendix app:min_bank_probability) and the fedlns-plan command."""

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from scipy.stats import hypergeom

from fedlns_core import ActivationPlan, plan_activation
from fedlns_core._plan_cli import main


def exact_risk(num_clients, n_malicious, bank_size):
    """Pr(M >= b/2) as an exact fraction from binomial coefficients (eqs. bad_bank_event, hypergeom_pmf)."""
    total = math.comb(num_clients, bank_size)
    bad = sum(math.comb(n_malicious, m) * math.comb(num_clients - n_malicious, bank_size - m)
              for m in range(math.ceil(bank_size / 2), min(n_malicious, bank_size) + 1))
    return Fraction(bad, total)


def oracle_threshold(num_clients, n_malicious, max_risk, risk):
    """Smallest M with risk(b) <= max_risk for every b in [M, K], by scanning every size."""
    threshold = num_clients + 1
    for bank_size in range(num_clients, 0, -1):
        if risk(num_clients, n_malicious, bank_size) > max_risk:
            break
        threshold = bank_size
    return threshold


def scipy_risk(num_clients, n_malicious, bank_size):
    return hypergeom(num_clients, n_malicious, bank_size).pmf(
        np.arange(math.ceil(bank_size / 2), bank_size + 1)).sum()


# ------------------------------------------------------------------------------------- oracle checks
@given(num_clients=st.integers(1, 60), malicious_fraction=st.floats(0, 0.4999),
       max_risk=st.floats(1e-6, 0.9))
@example(num_clients=20, malicious_fraction=0.25, max_risk=0.01)      # risk at 10 is 0.0163: threshold 11
@example(num_clients=3, malicious_fraction=0.25, max_risk=0.01)       # threshold is K itself
@example(num_clients=1, malicious_fraction=0.0, max_risk=0.5)
def test_threshold_is_the_exact_smallest_safe_size(num_clients, malicious_fraction, max_risk):
    n_malicious = math.ceil(malicious_fraction * num_clients - 1e-9)    # 0.07 * 100 counts as 7
    if 2 * n_malicious >= num_clients:
        with pytest.raises(ValueError, match="no bank size meets"):
            plan_activation(num_clients, malicious_fraction, 0.1, max_risk)
        return
    risks = [exact_risk(num_clients, n_malicious, b) for b in range(1, num_clients + 1)]
    assume(all(abs(float(risk) - max_risk) > 1e-9 for risk in risks))      # no float ties at the boundary
    plan = plan_activation(num_clients, malicious_fraction, 0.1, max_risk)
    expected = oracle_threshold(num_clients, n_malicious, Fraction(max_risk), exact_risk)
    assert plan.n_malicious == n_malicious
    assert plan.threshold == expected
    assert plan.risk == pytest.approx(float(risks[expected - 1]), rel=1e-9, abs=1e-300)
    assert plan.risk <= max_risk
    if plan.threshold > 1:
        assert risks[plan.threshold - 2] > max_risk                         # one smaller is not safe


@pytest.mark.parametrize("num_clients, malicious_fraction, max_risk", [
    (200, 0.4, 0.01), (200, 0.1, 0.01), (200, 0.45, 1e-3), (50, 0.25, 0.01), (301, 0.33, 0.05),
    (500, 0.2, 1e-6), (120, 0.49, 0.2)])
def test_threshold_matches_scipy_over_every_bank_size(num_clients, malicious_fraction, max_risk):
    # The planner computes exactly only below a Chernoff cut-off; the oracle scans all K sizes.
    plan = plan_activation(num_clients, malicious_fraction, 0.1, max_risk)
    assert plan.threshold == oracle_threshold(num_clients, plan.n_malicious, max_risk, scipy_risk)
    assert plan.risk == pytest.approx(scipy_risk(num_clients, plan.n_malicious, plan.threshold), abs=1e-15)
    for bank_size in (1, plan.threshold, num_clients):
        assert plan.risk_at(bank_size) == pytest.approx(
            hypergeom.sf(math.ceil(bank_size / 2) - 1, num_clients, plan.n_malicious, bank_size), abs=1e-15)


@given(num_clients=st.integers(2, 400), malicious_fraction=st.floats(0.001, 0.4999), bank_size=st.integers(1, 400))
def test_exact_risk_obeys_the_kl_bound_the_planner_prunes_with(num_clients, malicious_fraction, bank_size):
    # eq. bad_bank_kl_bound with the realised fraction ceil(alpha K)/K (Hoeffding: holds without replacement)
    n_malicious = math.ceil(malicious_fraction * num_clients - 1e-9)
    assume(2 * n_malicious < num_clients and bank_size <= num_clients)
    plan = plan_activation(num_clients, malicious_fraction, 0.5, 0.5)
    fraction = n_malicious / num_clients
    kl = 0.5 * math.log(1 / (4 * fraction * (1 - fraction)))
    assert plan.risk_at(bank_size) <= math.exp(-bank_size * kl) * (1 + 1e-9)


# ------------------------------------------------------------------------------------ the paper's figures
def test_paper_table_bank_reach_rounds():
    # Table tab:bank_reach_rounds: K=200, q=0.1 reaches 25/50/75% coverage after 3, 7 and 14 rounds.
    plan = plan_activation(200, 0.4, 0.1)
    assert [plan.rounds_to(size) for size in (50, 100, 150)] == [3, 7, 14]
    rows = plan.table([0.25, 0.5, 0.75])
    assert [(row.bank_size, row.expected_rounds) for row in rows] == [(50, 3), (100, 7), (150, 14)]


@pytest.mark.parametrize("malicious_fraction", [0.0, 0.05, 0.1, 0.25, 0.4, 0.45, 0.49])
@pytest.mark.parametrize("max_risk", [0.1, 0.01, 1e-4])
def test_guidelines_are_the_papers_formulas(malicious_fraction, max_risk):
    plan = plan_activation(1000, malicious_fraction, 0.1, max_risk)
    if malicious_fraction == 0:
        assert plan.threshold_kl == 0                                   # D(1/2 || 0) is infinite
    else:
        kl = 0.5 * math.log(1 / 2 / malicious_fraction) + 0.5 * math.log(1 / 2 / (1 - malicious_fraction))
        assert plan.threshold_kl == math.ceil(math.log(1 / max_risk) / kl)          # eq. mmin_exact_guideline
    assert plan.threshold_simple == math.ceil(math.log(1 / max_risk) / (2 * (0.5 - malicious_fraction) ** 2))
    assert plan.threshold_kl <= plan.threshold_simple                   # eq. kl_lower_bound
    assert plan.threshold <= max(plan.threshold_kl, 1)                  # the exact risk is below the bound


def test_expected_rounds_is_eq_round_to_reach_fraction():
    plan = plan_activation(200, 0.4, 0.1)
    assert plan.expected_rounds == math.ceil(math.log(1 - plan.threshold / 200) / math.log(0.9))
    assert plan.coverage == plan.threshold / 200
    assert plan_activation(8, 0.1, 0.5).rounds_to(6) == 2               # log(1/4)/log(1/2) = 2 exactly
    assert plan_activation(8, 0.1, 1.0).expected_rounds == 1            # everyone in the first round
    assert plan.rounds_to(200) is None                                  # the expected bank never holds all
    assert plan.table([1.0])[0].expected_rounds is None


# ----------------------------------------------------------------------------------------- properties
@given(num_clients=st.integers(3, 300), low=st.floats(0, 0.49), high=st.floats(0, 0.49),
       max_risk=st.floats(1e-4, 0.5))
def test_threshold_grows_with_the_malicious_fraction(num_clients, low, high, max_risk):
    low, high = sorted((low, high))
    assume(2 * math.ceil(high * num_clients) < num_clients)
    assert plan_activation(num_clients, low, 0.1, max_risk).threshold \
        <= plan_activation(num_clients, high, 0.1, max_risk).threshold


@given(num_clients=st.integers(3, 300), malicious_fraction=st.floats(0, 0.49), strict=st.floats(1e-5, 0.5),
       loose=st.floats(1e-5, 0.5))
def test_threshold_shrinks_as_more_risk_is_accepted(num_clients, malicious_fraction, strict, loose):
    strict, loose = sorted((strict, loose))
    assume(2 * math.ceil(malicious_fraction * num_clients) < num_clients)
    tight = plan_activation(num_clients, malicious_fraction, 0.1, strict)
    relaxed = plan_activation(num_clients, malicious_fraction, 0.1, loose)
    assert relaxed.threshold <= tight.threshold
    assert relaxed.threshold_kl <= tight.threshold_kl and relaxed.threshold_simple <= tight.threshold_simple


@given(num_clients=st.integers(3, 300), malicious_fraction=st.floats(0, 0.49), slow=st.floats(0.01, 1),
       fast=st.floats(0.01, 1))
def test_more_participation_never_needs_more_rounds(num_clients, malicious_fraction, slow, fast):
    slow, fast = sorted((slow, fast))
    assume(2 * math.ceil(malicious_fraction * num_clients) < num_clients)
    slow_plan = plan_activation(num_clients, malicious_fraction, slow)
    fast_plan = plan_activation(num_clients, malicious_fraction, fast)
    assert slow_plan.threshold == fast_plan.threshold                  # the threshold ignores q
    if fast_plan.expected_rounds is not None:
        assert slow_plan.expected_rounds is None or fast_plan.expected_rounds <= slow_plan.expected_rounds
    rounds = [row.expected_rounds for row in slow_plan.table() if row.expected_rounds is not None]
    assert rounds == sorted(rounds)


def test_large_federations_are_exact():     # their cost is a target of benchmarks/bench_plan.py
    plan = plan_activation(10_000, 0.45, 0.01)
    assert plan.risk_at(plan.threshold) <= 0.01 < plan.risk_at(plan.threshold - 1)
    big = plan_activation(100_000, 0.4, 0.001)
    assert np.isfinite(big.risk) and big.risk <= 0.01 < big.risk_at(big.threshold - 1)
    assert big.threshold <= big.threshold_kl


def test_malicious_count_ignores_floating_point_excess():
    assert 0.07 * 100 > 7
    assert plan_activation(100, 0.07, 0.1).n_malicious == 7
    assert plan_activation(100, 0.0701, 0.1).n_malicious == 8


def test_plan_is_frozen_and_echoes_its_inputs():
    plan = plan_activation(50, 0.25, 0.1, max_risk=0.05)
    assert isinstance(plan, ActivationPlan)
    assert (plan.num_clients, plan.malicious_fraction, plan.participation, plan.max_risk) == (50, 0.25, 0.1, 0.05)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.threshold = 3
    assert f"activation_threshold = {plan.threshold}" in plan.describe()


# --------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("arguments, message", [
    ((200, 0.5, 0.1), r"malicious_fraction must be in \[0, 0.5\)"),
    ((200, 0.7, 0.1), r"malicious_fraction must be in \[0, 0.5\)"),
    ((200, -0.1, 0.1), r"malicious_fraction must be in \[0, 0.5\)"),
    ((3, 0.4, 0.1), r"no bank size meets .* lower malicious_fraction to at most 0.3333"),
    ((10, 0.45, 0.1), r"5 malicious ids are at least half"),
    ((0, 0.1, 0.1), r"num_clients must be at least 1"),
    ((200, 0.1, 0.0), r"participation must be in \(0, 1\]"),
    ((200, 0.1, 1.5), r"participation must be in \(0, 1\]"),
    ((200, 0.1, 0.1, 0.0), r"max_risk must be in \(0, 1\)"),
    ((200, 0.1, 0.1, 1.0), r"max_risk must be in \(0, 1\)"),
    ((200, float("nan"), 0.1), r"malicious_fraction must be finite"),
])
def test_impossible_inputs_say_what_to_change(arguments, message):
    with pytest.raises(ValueError, match=message):
        plan_activation(*arguments)


@pytest.mark.parametrize("arguments", [(200.0, 0.1, 0.1), (True, 0.1, 0.1), (200, "0.1", 0.1)])
def test_wrong_types_are_refused(arguments):
    with pytest.raises(TypeError):
        plan_activation(*arguments)


def test_helpers_refuse_sizes_outside_the_population():
    plan = plan_activation(20, 0.25, 0.2)
    with pytest.raises(ValueError, match="at most num_clients=20"):
        plan.risk_at(21)
    with pytest.raises(ValueError, match="bank_size must be at least 1"):
        plan.risk_at(0)
    with pytest.raises(ValueError, match=r"coverage must be in \(0, 1\]"):
        plan.table([0.0])


# ------------------------------------------------------------------------------------------- command
def test_command_prints_the_plan_and_the_table(capsys):
    assert main(["--clients", "200", "--malicious", "0.4", "--participation", "0.1"]) == 0
    out = capsys.readouterr().out
    plan = plan_activation(200, 0.4, 0.1)
    assert f"activation_threshold = {plan.threshold}" in out
    assert f"KL {plan.threshold_kl}, simple {plan.threshold_simple}" in out
    rows = [line.split() for line in out.splitlines() if line.strip().endswith(("never",)) or
            (line.strip()[:1].isdigit() and "%" in line)]
    assert [row[0] for row in rows] == [f"{10 * i}%" for i in range(1, 11)]
    assert rows[4][1:] == ["100", f"{plan.risk_at(100):.3g}", "7"]     # 50% coverage: 7 rounds
    assert rows[-1][-1] == "never"


def test_command_takes_clients_per_round(capsys):
    assert main(["--clients", "20", "--malicious", "0.25", "--per-round", "4", "--coverage", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "activation_threshold = 11" in out and "0.2 of them per round (4)" in out
    assert "FedLNS.for_federation(20, 4, 0.25)" in out


@pytest.mark.parametrize("argv, message", [
    (["--clients", "20", "--malicious", "0.5", "--per-round", "4"], "--malicious must be in [0, 0.5)"),
    (["--clients", "4", "--malicious", "0.3", "--per-round", "2"], "no bank size meets"),
    (["--clients", "20", "--malicious", "0.2", "--per-round", "30"], "--per-round must be between 1 and"),
    (["--clients", "0", "--malicious", "0.2", "--per-round", "3"], "--clients must be at least 1"),
    (["--clients", "20", "--malicious", "0.2", "--participation", "0"], "--participation must be in (0, 1]"),
    (["--clients", "20", "--malicious", "0.2", "--participation", "0.1", "--max-risk", "2"], "--max-risk must be"),
    (["--clients", "x", "--malicious", "0.2", "--participation", "0.1"], "invalid int value"),
    (["--clients", "20", "--malicious", "0.2"], "one of the arguments --participation --per-round is required"),
    (["--clients", "20", "--malicious", "0.2", "--participation", "0.1", "--coverage", "1.5"], "--coverage"),
])
def test_command_errors_are_one_line_with_exit_code_2(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and message in captured.err, captured.err
    assert "Traceback" not in captured.err


def test_command_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "(default 0.01)" in capsys.readouterr().out
