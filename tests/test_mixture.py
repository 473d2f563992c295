import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

from fedlns_core import bic_gmm_retain


def two_groups(rng, n_benign=14, n_bad=6, dimension=50, gap=4.0):
    benign = rng.standard_normal((n_benign, dimension))
    bad = gap + rng.standard_normal((n_bad, dimension))
    features = np.vstack([benign, bad])
    return features, np.median(np.abs(features), axis=1)


def test_bic_equals_sklearn_and_parameter_count():
    features, scores = two_groups(np.random.default_rng(0))
    decision = bic_gmm_retain(features, scores, random_state=7)
    for c in (1, 2):
        reference = GaussianMixture(c, covariance_type="diag", reg_covar=1e-4, n_init=5, max_iter=200,
                                    init_params="kmeans", random_state=7).fit(features)
        assert decision.bic[c] == pytest.approx(reference.bic(features), rel=1e-10)
        # eq. num_params: p_c = (c - 1) + 2cD for a diagonal mixture.
        assert reference._n_parameters() == (c - 1) + 2 * c * features.shape[1]


def test_two_groups_keep_the_low_deviation_one():
    features, scores = two_groups(np.random.default_rng(1))
    decision = bic_gmm_retain(features, scores, random_state=0)
    assert decision.n_components == 2 and not decision.fallback
    np.testing.assert_array_equal(decision.labels, [0] * 14 + [1] * 6)
    kept, other = decision.cluster_scores
    assert kept == pytest.approx(np.median(scores[:14])) and other == pytest.approx(np.median(scores[14:]))


def test_one_group_keeps_everyone_unless_forced():
    rng = np.random.default_rng(2)
    features = rng.standard_normal((20, 5))
    scores = np.median(np.abs(features), axis=1)
    decision = bic_gmm_retain(features, scores, random_state=0)
    assert decision.n_components == 1 and not decision.labels.any() and decision.bic[1] < decision.bic[2]
    forced = bic_gmm_retain(features, scores, components="two", random_state=0)
    assert forced.n_components == 2 and 1 not in forced.bic and 0 < (forced.labels == 0).sum() < 20


def test_degenerate_inputs():
    same = np.ones((5, 3))
    for components in ("bic", "two"):
        decision = bic_gmm_retain(same, np.ones(5), components=components)
        assert decision.n_components == 1 and not decision.labels.any()
    single = bic_gmm_retain(np.array([[1.0, 2.0]]), np.array([1.5]))
    assert single.n_components == 1 and single.labels.tolist() == [0]
    pair = bic_gmm_retain(np.array([[0.0, 0.0], [9.0, 9.0]]), np.array([0.0, 9.0]), components="two")
    assert pair.labels.tolist() == [0, 1]
    with pytest.raises(ValueError, match="components"):
        bic_gmm_retain(same, np.ones(5), components="three")
    with pytest.raises(ValueError, match="at least one"):
        bic_gmm_retain(np.empty((0, 3)), np.empty(0))
