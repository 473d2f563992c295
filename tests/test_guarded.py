"""The retain rules that read the bank (``FedLNS.paper(retain_rule="guarded" | "peeled" | "bank")``) and
``FedLNS.for_federation`` with the paper's settings and the rule for the round size.

The targets are those of ``docs/rules.md``, checked on federations of the kind in ``tests/test_scenarios.py``
at seeds the rule study (``benchmarks/rule_study.py``) and ``benchmarks/rule_targets.py`` did not use.
"""

import numpy as np
import pytest

from fedlns_core import FedLNS, plan_activation, rule_for_round_size, standardize
from fedlns_core._rules import (bank_mixture_rule, bank_rule, benign_reference, benign_spread, guarded_rule,
                                paper_rule, peeled, separated)
from fedlns_core._screening import PAPER_SETTINGS, RULE_BY_ROUND_SIZE
from fedlns_core._signature import flat_signature
from fedlns_core._synthetic import SyntheticFederation


def paper_for_federation(n_clients, per_round, bound, **settings):
    """The planned threshold, the paper's settings and the rule for the round size (``docs/rules.md``)."""
    paper = {k: v for k, v in PAPER_SETTINGS.items() if k != "activation_threshold"}
    return FedLNS.for_federation(n_clients, per_round, bound, **{**paper, **rule_for_round_size(per_round),
                                                                 **settings})


def detection(n_clients, per_round, bound, fraction, seeds, rounds=40, **settings):
    """Pooled (tp, fn, fp, tn) of ``paper_for_federation`` over the active rounds of one federation per seed."""
    tp = fn = fp = tn = 0
    for seed in seeds:
        federation = SyntheticFederation(n_clients, fraction, n_layers=2, width=64, seed=seed)
        screener = paper_for_federation(n_clients, per_round, bound, random_state=seed, **settings)
        for round_index in range(rounds):
            models, counts = federation.sample_round(round_index, participation=per_round / n_clients)
            result = screener.screen(federation.global_params, models, counts)
            if not result.active:
                continue
            bad, out = federation.malicious & set(models), set(result.rejected)
            tp, fn = tp + len(bad & out), fn + len(bad - out)
            fp, tn = fp + len(out - bad), tn + len(set(models) - bad - out)
    return tp, fn, fp, tn


def test_target_small_federation():
    tp, fn, fp, tn = detection(20, 4, 0.25, 0.25, seeds=(31, 32, 33, 34))
    assert tp + fn >= 30
    assert tp / (tp + fn) >= 0.9 and fp / (fp + tn) <= 0.05, (tp, fn, fp, tn)


def test_target_clean_rounds_at_paper_scale():
    tp, fn, fp, tn = detection(200, 20, 0.4, 0.0, seeds=(31, 32))
    assert tp + fn == 0 and fp + tn >= 1000
    assert fp / (fp + tn) <= 0.02, (fp, tn)


def test_target_forty_percent_at_paper_scale():
    tp, fn, fp, tn = detection(200, 20, 0.4, 0.4, seeds=(31, 32))
    assert tp / (tp + fn) >= 0.98 and fp / (fp + tn) <= 0.02, (tp, fn, fp, tn)


def test_paper_rule_rejects_many_more_benign_clients_in_clean_rounds_than_guarded():
    # The reason the option exists: same federations, same planned threshold, only the rule differs. The
    # paper's rule rejects a benign client whenever one of its k-means starts isolates a single client (a
    # one-client component has variance reg_covar, hence a large likelihood), a draw that varies from
    # seed to seed: its pooled FPR over four federations was 1.9% here (seeds 31-34) and 4.0% (35-38),
    # around the 2% target, against 0.07% and 0% for the guarded rule.
    seeds = (31, 32, 33, 34)
    _, _, paper_fp, paper_tn = detection(200, 20, 0.4, 0.0, seeds=seeds, retain_rule="paper")
    _, _, fp, tn = detection(200, 20, 0.4, 0.0, seeds=seeds)
    paper_fpr, fpr = paper_fp / (paper_fp + paper_tn), fp / (fp + tn)
    assert fpr <= 0.02 and paper_fpr > 0.01 and paper_fpr > 10 * fpr, (paper_fpr, fpr)


# ------------------------------------------------------------------------------------------ for_federation
def test_for_federation_uses_the_plan():
    screener = FedLNS.for_federation(50, 5, 0.2, max_risk=0.05, random_state=3)
    plan = plan_activation(50, 0.2, 5 / 50, max_risk=0.05)
    assert screener.plan_ == plan
    assert screener.activation_threshold == plan.threshold
    assert (screener.retain_rule, screener.clip, screener.random_state) == ("support", "median", 3)   # 5 per round
    assert FedLNS.for_federation(50, 5).plan_ == plan_activation(50, 0.4, 5 / 50)     # planned for 40% by default
    assert FedLNS.for_federation(50, 8).retain_rule == FedLNS().retain_rule == "cohort"   # the default from 8


@pytest.mark.parametrize("per_round, rule, separation", [
    (1, "bank", 0.0), (2, "bank", 0.0), (3, "peeled", 3.0), (4, "peeled", 3.0), (5, "peeled", 2.0),
    (7, "peeled", 2.0), (8, "guarded", 1.0), (10, "guarded", 1.0), (14, "guarded", 1.0), (15, "guarded", 0.0),
    (20, "guarded", 0.0), (100, "guarded", 0.0)])
def test_the_paper_family_rule_measured_for_the_round_size(per_round, rule, separation):
    screener = FedLNS.for_federation(200, per_round, 0.2, **rule_for_round_size(per_round))
    assert (screener.retain_rule, screener.min_separation) == (rule, separation)
    assert RULE_BY_ROUND_SIZE[-1][0] is None


def test_for_federation_settings_override_the_choice():
    screener = FedLNS.for_federation(200, 20, 0.4, activation_threshold=100, retain_rule="paper", ema=0.5)
    assert (screener.activation_threshold, screener.retain_rule, screener.ema) == (100, "paper", 0.5)


@pytest.mark.parametrize("args, error, match", [
    ((20, 0, 0.25), ValueError, "clients_per_round must be between 1 and num_clients=20"),
    ((20, 21, 0.25), ValueError, "clients_per_round must be between 1"),
    ((20, 4.0, 0.25), TypeError, "clients_per_round must be an int"),
    ((20, 4, 0.5), ValueError, "malicious_fraction"),
    ((10, 2, 0.45), ValueError, "half"),
])
def test_for_federation_errors_say_what_to_change(args, error, match):
    with pytest.raises(error, match=match):
        FedLNS.for_federation(*args)


def test_for_federation_rejects_an_unknown_setting():
    with pytest.raises(ValueError, match="retain_rule must be one of 'cohort', 'support', 'paper', 'guarded', 'peeled', 'bank'"):
        FedLNS.for_federation(20, 4, 0.25, retain_rule="median")


# ------------------------------------------------------------------------------------------ the rule itself
def test_lone_extreme_client_is_rejected_and_a_lone_typical_one_kept():
    rng = np.random.default_rng(5)
    bank = rng.standard_normal((150, 60))
    features = rng.standard_normal((4, 60))
    features[0] += 4.0                                   # far outside the bank's benign scores
    outcome = guarded_rule(features, bank, random_state=0)
    assert outcome.retained.tolist() == [False, True, True, True]
    assert "lone client" in outcome.reasons[0]
    center, width = benign_reference(bank, random_state=0)
    relaxed = guarded_rule(features, bank, lone_separation=1e6, random_state=0)
    assert relaxed.retained.all()                        # the same lone client, judged typical enough


def test_a_lone_client_cannot_hide_a_group():
    # one extreme decoy takes a component by itself under the paper's rule; the guarded rule sets it
    # aside, fits again and finds the three moderate attackers
    rng = np.random.default_rng(7)
    bank = rng.standard_normal((200, 80))
    features = rng.standard_normal((14, 80))
    features[0] += 25.0
    features[1:4] += 2.5
    outcome = guarded_rule(features, bank, random_state=1)
    assert outcome.retained.tolist() == [False] * 4 + [True] * 10


def test_min_separation_undoes_only_close_groups():
    rng = np.random.default_rng(8)
    bank = rng.standard_normal((200, 80))
    features = rng.standard_normal((12, 80))
    features[:5] += 2.5
    assert guarded_rule(features, bank, min_separation=1.0, random_state=0).retained.tolist() == [False] * 5 + [True] * 7
    assert guarded_rule(features, bank, min_separation=1e6, random_state=0).retained.all()


def test_bank_rule_names_the_study_rules():
    rng = np.random.default_rng(4)
    bank = rng.standard_normal((120, 30))
    bank[:30] += 2.0
    features = np.vstack([rng.standard_normal((5, 30)), bank[:2]])
    spread = benign_spread(bank, random_state=2)
    expected_peeled = peeled(lambda rows: separated(paper_rule(rows, random_state=2), rows, spread, 2.0), features)
    got = bank_rule("peeled", features, bank, lone_separation=3.0, min_separation=2.0, random_state=2)
    np.testing.assert_array_equal(got.retained, expected_peeled.retained)
    got = bank_rule("bank", features, bank, lone_separation=3.0, min_separation=1.0, random_state=2, components="bic")
    np.testing.assert_array_equal(got.retained, bank_mixture_rule(features, bank, min_separation=1.0,
                                                                  random_state=2).retained)
    assert got.retained.tolist() == [True] * 5 + [False] * 2
    with pytest.raises(ValueError, match="unknown retain rule"):
        bank_rule("median", features, bank, lone_separation=3.0, min_separation=0.0)


def test_guarded_rule_does_not_mutate_inputs():
    rng = np.random.default_rng(9)
    features, bank = rng.standard_normal((6, 20)), rng.standard_normal((40, 20))
    copies = features.copy(), bank.copy()
    guarded_rule(features, bank, random_state=0)
    np.testing.assert_array_equal(features, copies[0])
    np.testing.assert_array_equal(bank, copies[1])


@pytest.mark.parametrize("rule", ["guarded", "peeled", "bank"])
def test_screener_decides_as_the_rule_does(rule):
    federation = SyntheticFederation(30, 0.3, n_layers=2, width=16, seed=4)
    screener = FedLNS.paper(activation_threshold=20, random_state=3, retain_rule=rule, min_separation=1.0)
    for round_index in range(3):
        models, counts = federation.sample_round(round_index, participation=0.5)
        result = screener.screen(federation.global_params, models, counts)
    assert result.active
    ids = sorted(models)
    signatures = np.array([flat_signature(federation.global_params, models[i], result.signature_keys) for i in ids])
    median, mad = screener.bank.reference_flat(screener.mad_floor)      # the bank after the round = the refresh
    bank_features = standardize(screener.bank._columns[:, :len(screener.bank)].T, median, mad)
    outcome = bank_rule(rule, standardize(signatures, median, mad), bank_features, lone_separation=3.0,
                        min_separation=1.0, random_state=screener._round_seed(2), components="bic")
    assert [i for i, keep in zip(ids, outcome.retained) if keep] == sorted(result.retained)
    assert set(result.rejected) == {i for i, keep in zip(ids, outcome.retained) if not keep}
    assert all(reason.startswith("screened: ") for reason in result.rejected.values())


def test_guarded_settings_survive_save_and_load(tmp_path):
    screener = FedLNS.for_federation(20, 4, 0.25, random_state=1, lone_separation=4.0, min_separation=0.5)
    federation = SyntheticFederation(20, 0.25, n_layers=1, width=8, seed=1)
    models, counts = federation.sample_round(0, participation=0.2)
    screener.screen(federation.global_params, models, counts)
    screener.save(tmp_path / "state.npz")
    loaded = FedLNS.load(tmp_path / "state.npz")
    assert loaded.get_params() == screener.get_params()


@pytest.mark.parametrize("name, value", [("retain_rule", "median"), ("lone_separation", -1.0),
                                         ("min_separation", float("nan"))])
def test_guarded_settings_are_validated(name, value):
    with pytest.raises(ValueError, match=name):
        FedLNS.paper(**{name: value}).validate_params()
