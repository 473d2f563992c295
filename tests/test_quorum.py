"""``FedLNS(quorum=q)``: a screened round whose kept clients are fewer than ``q`` of its screened clients is held."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlns_core import FedLNS
from fedlns_core._synthetic import SyntheticFederation

from test_cohort import _undecided_rounds


@settings(max_examples=15, deadline=None)
@given(
    st.floats(0.0, 1.0),
    st.sampled_from([0.2, 0.45, 0.6]),
    st.integers(0, 2**16),
    st.sampled_from(["paper", "support", "cohort"]),
)
def test_quorum_holds_exactly_the_rounds_the_screen_cuts_below_it(quorum, fraction, seed, rule):
    """The same rounds screened with and without a quorum: every decision, label, score and the bank are the same;
    the aggregate is the screen's where it kept at least ``quorum`` of the round, and nobody's otherwise."""
    federation = SyntheticFederation(30, fraction, n_layers=2, width=16, seed=seed)
    settings_ = dict(retain_rule=rule, activation_threshold=12, random_state=seed, warmup="hold", clip=None)
    plain, guarded = FedLNS(**settings_), FedLNS(**settings_, quorum=quorum)
    for round_index in range(5):
        models, counts = federation.sample_round(round_index, participation=0.4)
        without = plain.screen(federation.global_params, models, counts)
        result = guarded.screen(federation.global_params, models, counts)
        assert result.labels == without.labels and result.scores == without.scores
        if not without.active:
            assert result == without
            continue
        screened = len(without.scores)
        if without.retained and len(without.retained) < quorum * screened:
            assert result.held and result.retained == () and set(result.rejected) == set(models)
            for client_id in without.retained:
                assert result.rejected[client_id].startswith("held: the screen keeps")
            aggregate = result.aggregate(federation.global_params, models)
            assert all(np.array_equal(a, federation.global_params[k]) for k, a in aggregate.items())
        else:
            assert not result.held and result.retained == without.retained and result.rejected == without.rejected
    assert guarded.bank.ids == plain.bank.ids
    np.testing.assert_array_equal(guarded.bank.reference_flat()[0], plain.bank.reference_flat()[0])


def test_quorum_holds_the_round_the_attackers_hold_and_says_why(tmp_path):
    """The attackers hold the round (6 of 10); the support fallback keeps the 4 honest clients, fewer than half."""
    global_params, rounds = _undecided_rounds(5)
    screener = FedLNS(activation_threshold=20, random_state=0, quorum=0.5, cohort_undecided="support")
    for clients in rounds:
        result = screener.screen(global_params, clients, {i: 10 for i in clients})
    assert result.active and result.held and result.retained == ()
    assert sorted(c for c, r in result.rejected.items() if r.startswith("held:")) == [6, 7, 8, 9]
    assert "keeps 4 of the round's 10 screened clients, fewer than the quorum (0.5 of them)" in result.rejected[6]
    assert result.labels[6] == 0 and result.labels[0] == 1  # the screen's own decision, kept in the labels
    assert "held:" in result.explain() and result.to_dict()["held"] is True
    screener.save(tmp_path / "screener.npz")
    assert FedLNS.load(tmp_path / "screener.npz").quorum == 0.5
    at_four = FedLNS(activation_threshold=20, random_state=0, quorum=0.4, cohort_undecided="support")  # 4 of 10 is not fewer than 0.4 of them
    for clients in rounds:
        result = at_four.screen(global_params, clients, {i: 10 for i in clients})
    assert not result.held and sorted(result.retained) == [6, 7, 8, 9]


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "half", True])
def test_quorum_must_be_a_share(value):
    with pytest.raises(ValueError, match="quorum"):
        FedLNS(quorum=value).validate_params()


def test_quorum_is_off_by_default_and_in_states_saved_before_it(tmp_path):
    assert FedLNS().quorum == 0.0
    screener = FedLNS()
    screener.save(tmp_path / "screener.npz")
    assert FedLNS.load(tmp_path / "screener.npz").quorum == 0.0
