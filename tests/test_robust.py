import numpy as np
import scipy.stats
from hypothesis import example, given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from fedlns_core import deviation_scores, median_mad, standardize

finite = st.floats(-1e6, 1e6, allow_nan=False, width=64)
bank_arrays = st.integers(1, 9).flatmap(
    lambda d: st.integers(1, 12).flatmap(lambda n: arrays(np.float64, (d, n), elements=finite)))


@given(bank_arrays)
@example(np.array([[1.0, 2.0, 4.0, 10.0]]))
@example(np.zeros((3, 5)))
def test_median_mad_match_numpy_and_scipy(columns):
    median, mad = median_mad(columns)
    np.testing.assert_array_equal(median, np.median(columns, axis=1))
    np.testing.assert_allclose(mad, scipy.stats.median_abs_deviation(columns, axis=1), rtol=1e-12, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 260), st.integers(0, 2**32 - 1), st.booleans(), st.sampled_from([np.float64, np.float32]))
def test_median_mad_exact_over_blocks_threads_and_ties(n, seed, ties, dtype):
    # 9,000 rows: three blocks of rows, on two threads once D * n reaches 2**20; the MAD is selected from
    # the sorted rows, not sorted again, and must equal numpy's median of the deviations bit for bit.
    # float32 columns (the bank's storage when lossless) give the float64 statistics of their values.
    rng = np.random.default_rng(seed)
    columns = (rng.integers(-3, 4, (9000, n)) if ties else rng.standard_normal((9000, n))).astype(dtype)
    before, exact = columns.copy(), columns.astype(np.float64)
    median, mad = median_mad(columns)
    assert median.dtype == mad.dtype == np.float64
    np.testing.assert_array_equal(median, np.median(exact, axis=1))
    np.testing.assert_array_equal(mad, np.median(np.abs(exact - median[:, None]), axis=1))
    np.testing.assert_array_equal(columns, before)


@given(bank_arrays, st.floats(-100, 100), st.floats(0.01, 100), st.booleans())
def test_median_mad_affine_equivariance(columns, shift, scale, negate):
    factor = -scale if negate else scale
    median, mad = median_mad(columns)
    moved_median, moved_mad = median_mad(factor * columns + shift)
    tolerance = 1e-9 * (1 + np.abs(columns).max()) * (1 + scale) + 1e-9 * abs(shift)
    np.testing.assert_allclose(moved_median, factor * median + shift, atol=tolerance)
    np.testing.assert_allclose(moved_mad, scale * mad, atol=tolerance)


def test_mad_floor_applies_per_coordinate():
    columns = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 3.0]])
    median, mad = median_mad(columns, mad_floor=1e-6)
    np.testing.assert_array_equal(median, [1.0, 1.0])
    np.testing.assert_array_equal(mad, [1e-6, 1.0])


def test_standardize_and_scores_by_hand():
    z = standardize(np.array([[3.0, -1.0, 0.0]]), np.array([1.0, 1.0, 0.0]), np.array([2.0, 1.0, 0.5]))
    np.testing.assert_array_equal(z, [[1.0, -2.0, 0.0]])
    np.testing.assert_array_equal(deviation_scores(z), [1.0])
    np.testing.assert_array_equal(deviation_scores(np.array([[1.0, -2.0, 3.0, -4.0]])), [2.5])


@given(st.integers(1, 6).flatmap(lambda n: st.integers(1, 40).flatmap(
    lambda d: arrays(np.float64, (n, d), elements=st.floats(allow_nan=True, allow_infinity=True)))))
def test_deviation_scores_are_numpys_median_of_magnitudes(features):
    np.testing.assert_array_equal(deviation_scores(features), np.median(np.abs(features), axis=1))


def test_deviation_scores_on_two_threads_with_nan_rows():
    # 5 x 300,001 values: past 2**20, so the rows are split over two threads; odd D, one NaN row per half.
    features = np.random.default_rng(3).standard_normal((5, 300_001))
    features[1, 7] = features[4, -1] = np.nan
    np.testing.assert_array_equal(deviation_scores(features), np.median(np.abs(features), axis=1))
    np.testing.assert_array_equal(deviation_scores(features[:, 1:]), np.median(np.abs(features[:, 1:]), axis=1))
