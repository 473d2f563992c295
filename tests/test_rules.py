"""Prototype retain rules (fedlns_core._rules), measured in benchmarks/rule_study.py."""

import numpy as np
import pytest

from fedlns_core import FedLNS, bic_gmm_retain, deviation_scores, standardize
from fedlns_core._rules import (RuleOutcome, bank_mixture_rule, benign_spread, fresh_entries, paper_rule, peeled,
                                score_rule, separated)
from fedlns_core._signature import flat_signature
from fedlns_core._synthetic import SyntheticFederation


def test_paper_rule_decides_as_the_screener_does():
    federation = SyntheticFederation(30, 0.3, n_layers=2, width=16, seed=4)
    screener = FedLNS.paper(activation_threshold=20, random_state=3)
    for round_index in range(2):
        models, counts = federation.sample_round(round_index, participation=0.5)
        result = screener.screen(federation.global_params, models, counts)
    assert result.active
    keys = result.signature_keys
    ids = sorted(models)
    signatures = np.array([flat_signature(federation.global_params, models[i], keys) for i in ids])
    features = standardize(signatures, *screener.bank.reference_flat(screener.mad_floor))
    outcome = paper_rule(features, random_state=screener._round_seed(1))
    assert [i for i, keep in zip(ids, outcome.retained) if keep] == sorted(result.retained)
    assert outcome.n_components == result.n_components == 2
    assert all(outcome.reasons[ids.index(i)] for i in result.rejected)


def test_score_rule_is_the_mixture_on_the_scores():
    rng = np.random.default_rng(0)
    features = rng.standard_normal((12, 40))
    features[:4] += 3.0
    outcome = score_rule(features, random_state=1)
    scores = deviation_scores(features)
    expected = bic_gmm_retain(scores[:, None], scores, random_state=1).labels == 0
    np.testing.assert_array_equal(outcome.retained, expected)
    assert not outcome.retained[:4].any() and outcome.retained[4:].all()


def bank_and_round(rng, attackers_in_bank):
    bank = rng.standard_normal((120, 50))
    bank[:attackers_in_bank] += 2.5
    features = np.vstack([bank[0] if attackers_in_bank else rng.standard_normal(50), rng.standard_normal(50)])
    return features, bank


def test_bank_mixture_judges_two_clients_against_the_bank():
    rng = np.random.default_rng(1)
    features, bank = bank_and_round(rng, attackers_in_bank=30)
    outcome = bank_mixture_rule(features, bank, min_separation=2, random_state=0)
    assert outcome.retained.tolist() == [False, True]
    assert outcome.n_components == 2 and outcome.separation > 2
    assert outcome.reasons[0].startswith("bank mixture") and outcome.reasons[1] == ""


def test_bank_mixture_keeps_everyone_when_the_bank_is_one_group():
    rng = np.random.default_rng(2)
    features, bank = bank_and_round(rng, attackers_in_bank=0)
    assert bank_mixture_rule(features, bank, random_state=0).retained.all()
    single = bank_mixture_rule(features[:1], bank, random_state=0)
    assert single.retained.tolist() == [True]


def test_separation_undoes_small_splits_only():
    rng = np.random.default_rng(3)
    features = rng.standard_normal((4, 30))
    split = RuleOutcome(np.array([True, True, False, True]), ("", "", "split", ""), 2)
    scores = deviation_scores(features)
    gap = scores[2] - np.median(scores[[0, 1, 3]])
    assert separated(split, features, 0.01, abs(gap) / 0.01 + 1).retained.all()
    features[2] *= 4                                                     # now far apart
    kept = separated(split, features, 0.01, 2)
    np.testing.assert_array_equal(kept.retained, split.retained)
    assert kept.separation == pytest.approx((deviation_scores(features)[2] - np.median(scores[[0, 1, 3]])) / 0.01)
    everyone = RuleOutcome(np.ones(4, dtype=bool), ("",) * 4, 1)
    assert separated(everyone, features, 0.01, 2) is everyone


def test_benign_spread_is_the_width_of_the_low_group():
    rng = np.random.default_rng(6)
    bank = rng.standard_normal((150, 200))
    bank[:60] *= 2.0                                                     # 40% with much larger scores
    benign_scores = deviation_scores(bank[60:])
    assert benign_spread(bank, random_state=0) == pytest.approx(np.std(benign_scores), rel=0.3)
    assert benign_spread(np.ones((5, 3))) == pytest.approx(1e-3)       # identical entries: the floor


def test_peeled_bank_mixture_finds_attackers_behind_a_decoy():
    rng = np.random.default_rng(7)
    bank = rng.standard_normal((120, 100))
    bank[:25] *= 1.6                                                     # moderate attackers
    bank[25] *= 12.0                                                     # one extreme decoy
    features = bank[[25, 0, 1, 100]]                                     # decoy, two attackers, one benign
    once = bank_mixture_rule(features, bank, min_separation=3, random_state=0)
    assert once.retained.tolist() == [False, True, True, True]
    peeled_out = bank_mixture_rule(features, bank, min_separation=3, peel_steps=3, random_state=0)
    assert peeled_out.retained.tolist() == [False, False, False, True]


def test_peeling_removes_a_decoy_and_then_the_attackers_it_hid():
    def largest_if_far(rows):                   # a stand-in rule: split off only the top score when far out
        scores = deviation_scores(rows)
        retained = np.ones(len(rows), dtype=bool)
        top = int(np.argmax(scores))
        if scores[top] > 2 * np.median(scores):
            retained[scores > (scores[top] + np.median(scores)) / 2] = False
        return RuleOutcome(retained, tuple("" if keep else "far" for keep in retained), 2)

    features = np.ones((8, 5))
    features[0] *= 50                                                    # decoy
    features[1:3] *= 5                                                   # moderate attackers
    assert largest_if_far(features).retained.tolist() == [False] + [True] * 7
    outcome = peeled(largest_if_far, features)
    assert outcome.retained.tolist() == [False, False, False] + [True] * 5
    assert outcome.reasons[0] == "peel 1: far" and outcome.reasons[1] == "peel 2: far"
    assert peeled(largest_if_far, features, max_steps=1).retained.tolist() == [False] + [True] * 7


def test_fresh_entries_fall_back_to_the_whole_bank():
    ages = np.array([0, 1, 5, 9, 2])
    assert fresh_entries(ages, 2, 3).tolist() == [True, True, False, False, True]
    assert fresh_entries(ages, 2, 4).all()


def test_rules_do_not_mutate_their_inputs():
    rng = np.random.default_rng(5)
    features, bank = bank_and_round(rng, attackers_in_bank=30)
    before = features.copy(), bank.copy()
    paper_rule(features, random_state=0), score_rule(features, random_state=0)
    bank_mixture_rule(features, bank, random_state=0)
    np.testing.assert_array_equal(features, before[0])
    np.testing.assert_array_equal(bank, before[1])


def test_heavy_tailed_federation():
    gaussian = SyntheticFederation(10, 0.0, n_layers=2, width=64, seed=7)
    same = SyntheticFederation(10, 0.0, n_layers=2, width=64, seed=7, noise_df=None)
    np.testing.assert_array_equal(gaussian.signature(3, 0), same.signature(3, 0))
    heavy = SyntheticFederation(10, 0.0, n_layers=2, width=64, seed=7, noise_df=3.0)

    def noise(federation):
        draws = np.array([federation.signature(i % 10, 5) for i in range(40)])
        centered = (draws - draws.mean(axis=0)) / federation.noise_scale
        return np.mean(centered ** 4) / np.mean(centered ** 2) ** 2    # kurtosis, 3 for a Gaussian

    assert noise(gaussian) < 4 < noise(heavy)
    with pytest.raises(ValueError, match="noise_df must be above 2"):
        SyntheticFederation(10, 0.0, seed=0, noise_df=2)
