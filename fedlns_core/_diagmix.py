"""A diagonal Gaussian mixture for few points in many dimensions (N << D), the screen's mixture solver.

It fits the same model as scikit-learn's ``GaussianMixture(covariance_type="diag", init_params="kmeans")``
(eqs. ``gmm_density`` and ``mle``: k-means++ seeded Lloyd iterations give the initial responsibilities,
then EM until the mean log-likelihood changes by less than ``tol``, best of ``n_init`` starts, BIC as
``-2 log L + p log N``), organised for a round of N ~ 20 clients with D up to a few hundred thousand
signature coordinates:

* k-means runs in the N x N Gram space: the squared distance from a point to the mean of a group is
  ``G_ii - 2 mean_j G_ij + mean_jk G_jk``, so after one (N, D) x (D, N) product every k-means step costs
  O(N^2), not O(N D);
* starts whose k-means partitions coincide give identical EM runs, so EM runs once per distinct
  partition (in a clearly split round, all five starts usually find the same one);
* the squared residuals ``(x - mu_k)^2`` computed for the M-step's variances are the ones the next
  E-step needs, so an M-step and the E-step after it are one pass over the features, block of
  coordinates by block (each block stays in cache);
* when an E-step returns the responsibilities it started from (hard assignments that did not move, the
  usual case for N << D), EM has converged: the next iteration would repeat it.

Variances and the fitted rows' Mahalanobis terms are computed from centred residuals (scikit-learn
expands the square, which loses precision when a group lies far from the origin relative to its spread). The
decisions are checked against scikit-learn's on generated rounds in ``tests/test_diagmix.py``;
``solver="sklearn"`` keeps scikit-learn's fit selectable as the reference.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import logsumexp

from ._robust import _PARALLEL_ELEMENTS

_EPS = 10 * np.finfo(np.float64).eps  # added to component weights, as scikit-learn does
_KMEANS_MAX_ITER = 300
_PARALLEL_LANES = 2  # threads of the M/E pass on large features (numpy releases the GIL)


class DiagonalMixture:
    """A fitted diagonal mixture with the parts of scikit-learn's ``GaussianMixture`` the rules read.

    Attributes ``weights_`` (k,), ``means_`` (k, D), ``covariances_`` (k, D), ``lower_bound_`` (the
    mean log-likelihood of the best start), ``n_iter_`` and ``converged_``; and, for the rows it was fitted
    to, ``labels_`` (``predict``) and ``bic_`` (``bic``), computed once by :func:`fit_diagonal_mixture`.
    """

    def __init__(
        self,
        weights: np.ndarray,
        means: np.ndarray,
        covariances: np.ndarray,
        lower_bound: float,
        n_iter: int,
        converged: bool,
    ):
        self.weights_ = weights
        self.means_ = means
        self.covariances_ = covariances
        self.lower_bound_ = lower_bound
        self.n_iter_ = n_iter
        self.converged_ = converged
        self.labels_: np.ndarray | None = None
        self.bic_: float | None = None

    def _describe_training(self, weighted: np.ndarray, n_rows: int) -> None:
        # weighted: the E-step of these parameters on the fitted rows, (N, k)
        self.labels_ = np.argmax(weighted, axis=1)
        self.bic_ = self._bic_from(float(np.mean(logsumexp(weighted, axis=1))), n_rows)

    def _bic_from(self, mean_log_likelihood: float, n_rows: int) -> float:
        return -2.0 * mean_log_likelihood * n_rows + self.n_parameters() * np.log(n_rows)

    @property
    def n_components(self) -> int:
        return self.weights_.shape[0]

    def _weighted_log_prob(self, features: np.ndarray) -> np.ndarray:
        features = np.asarray(features, dtype=np.float64)
        return _weighted_log_prob(features, features**2, self.weights_, self.means_, self.covariances_)

    def score_samples(self, features: np.ndarray) -> np.ndarray:
        """Log-density of each row, (N,)."""
        return logsumexp(self._weighted_log_prob(features), axis=1)

    def score(self, features: np.ndarray) -> float:
        """Mean log-density of the rows."""
        return float(np.mean(self.score_samples(features)))

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Most likely component of each row (ties: the lower index)."""
        return np.argmax(self._weighted_log_prob(features), axis=1)

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        """Posterior probability of each component for each row, (N, k)."""
        weighted = self._weighted_log_prob(features)
        return np.exp(weighted - logsumexp(weighted, axis=1, keepdims=True))

    def n_parameters(self) -> int:
        """Free parameters of a diagonal mixture: ``(k - 1) + 2 k D`` (eq. ``num_params``)."""
        k, n_features = self.means_.shape
        return (k - 1) + 2 * k * n_features

    def bic(self, features: np.ndarray) -> float:
        """``-2 log L + p log N`` (eq. ``bic``), as scikit-learn's ``GaussianMixture.bic``."""
        return self._bic_from(self.score(features), features.shape[0])


def _gram_distances(gram: np.ndarray, labels: np.ndarray, n_components: int) -> np.ndarray:
    """Squared distances (N, k) from every point to the mean of each labelled group, from the Gram matrix."""
    onehot = np.eye(n_components)[labels]  # (N, k)
    counts = onehot.sum(axis=0)  # (k,)
    safe = np.maximum(counts, 1.0)
    cross = gram @ onehot  # (N, k): sum_j in k of G_ij
    within = np.einsum("ik,ik->k", onehot, cross)  # (k,): sum_jl in k of G_jl
    distances = np.diag(gram)[:, None] - 2.0 * cross / safe + within / safe**2
    distances[:, counts == 0] = np.inf
    return distances


def _kmeans_plus_plus(distances: np.ndarray, n_components: int, rng: np.random.Generator) -> list[int]:
    """Greedy k-means++ seeds (2 + log k candidate draws per seed, the lowest potential wins) on the
    pairwise squared distances (N, N)."""
    n_rows = distances.shape[0]
    centres = [int(rng.integers(n_rows))]
    closest = distances[centres[0]].copy()
    trials = 2 + int(np.log(n_components))
    for _ in range(1, n_components):
        potential = closest.sum()
        if potential <= 0:  # every point sits on a centre
            centres.append(int(rng.integers(n_rows)))
            continue
        draws = rng.uniform(size=trials) * potential
        candidates = np.minimum(np.searchsorted(np.cumsum(closest), draws), n_rows - 1)
        candidate_closest = np.minimum(closest, distances[candidates])  # (trials, N)
        best = int(np.argmin(candidate_closest.sum(axis=1)))
        centres.append(int(candidates[best]))
        closest = candidate_closest[best]
    return centres


def _kmeans_labels(gram: np.ndarray, distances: np.ndarray, n_components: int, rng: np.random.Generator) -> np.ndarray:
    """Lloyd's k-means from k-means++ seeds, entirely in the Gram space; labels (N,)."""
    centres = _kmeans_plus_plus(distances, n_components, rng)
    labels = np.argmin(distances[:, centres], axis=1)
    for _ in range(_KMEANS_MAX_ITER):
        to_groups = _gram_distances(gram, labels, n_components)
        empty = np.flatnonzero(np.bincount(labels, minlength=n_components) == 0)
        new = np.argmin(to_groups, axis=1)
        for group in empty:  # give an empty group the worst-fitted point
            worst = int(np.argmax(np.min(to_groups, axis=1)))
            new[worst] = group
            to_groups[worst] = -np.inf
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def _canonical(labels: np.ndarray) -> tuple[int, ...]:
    """The partition a labelling makes, independent of the group names (renumbered by first appearance)."""
    names: dict[int, int] = {}
    return tuple(names.setdefault(label, len(names)) for label in labels.tolist())


def _block_columns(n_rows: int) -> int:
    """Coordinates per block, so that a block of the (N, D) features (and its residuals) stays in cache."""
    return max(256, (1 << 17) // max(n_rows, 1))  # 1 MiB of float64: measured best of 2**14-2**19


class _Lane:
    """One thread's buffers for a pass over a range of coordinate blocks."""

    def __init__(self, n_rows: int, step: int, n_components: int):
        self.residuals = np.empty((n_rows, step))
        self.block_means = np.empty((n_components, step))
        self.variance = np.empty(step)
        self.precision = np.empty(step)
        self.share = np.empty(n_rows)
        self.mahalanobis = np.empty((n_rows, n_components))


class _Workspace:
    """Buffers for the M/E passes of one fit, made once: a fresh multi-megabyte array per pass is a new
    mapping whose pages fault in again, which measured 2-3x slower than the arithmetic inside a screening
    round. The coordinate blocks are split into one contiguous range per lane (two lanes on two threads when
    the features hold at least 2**20 values and there are two cores); each lane sums its own Mahalanobis
    terms and the lanes' sums are added in lane order, so results do not depend on thread timing.
    ``pair()`` hands out a (means, variances) pair for one EM run; ``give_back`` returns one that no kept
    result uses. A context manager: leaving it stops the lanes' threads."""

    def __init__(self, n_rows: int, n_features: int, n_components: int):
        self.step = max(1, min(_block_columns(n_rows), n_features))
        self.shape = (n_components, n_features)
        n_blocks = -(-n_features // self.step)
        lanes = 1
        if n_rows * n_features >= _PARALLEL_ELEMENTS:
            lanes = max(1, min(_PARALLEL_LANES, n_blocks, os.cpu_count() or 1))
        bounds = [min(n_features, (n_blocks * lane // lanes) * self.step) for lane in range(lanes + 1)]
        self.ranges = list(itertools.pairwise(bounds))
        self.lanes = [_Lane(n_rows, self.step, n_components) for _ in range(lanes)]
        self._pool = ThreadPoolExecutor(lanes) if lanes > 1 else None
        self._spare: list[tuple[np.ndarray, np.ndarray]] = []

    def __enter__(self) -> _Workspace:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def run(self, task) -> None:
        """``task(lane, first, stop)`` for every lane and its range of coordinates."""
        jobs = [(lane, first, stop) for lane, (first, stop) in zip(self.lanes, self.ranges)]
        if self._pool is None:
            for job in jobs:
                task(*job)
        else:
            for future in [self._pool.submit(task, lane, first, stop) for lane, first, stop in jobs]:
                future.result()

    def pair(self) -> tuple[np.ndarray, np.ndarray]:
        return self._spare.pop() if self._spare else (np.empty(self.shape), np.empty(self.shape))

    def give_back(self, pair: tuple[np.ndarray, np.ndarray]) -> None:
        self._spare.append(pair)


def _m_then_e(
    features: np.ndarray,
    resp: np.ndarray,
    reg_covar: float,
    work: _Workspace,
    means: np.ndarray,
    covariances: np.ndarray,
):
    """An M-step from responsibilities (N, k), written into ``means`` and ``covariances`` (k, D), then the
    E-step's weighted log-probabilities (N, k) under those parameters, in one pass over the features, block
    of coordinates by block (each lane of ``work`` over its own range of blocks).

    Per block and component: means ``resp_k @ x / n_k``, centred squared residuals ``(x - mu_k)^2`` of every
    row, variances ``resp_k @ (x - mu_k)^2 / n_k + reg_covar``, and each row's share of
    ``sum_d (x_d - mu_kd)^2 / var_kd``, the Mahalanobis term of the E-step. Returns ``weights, weighted``.
    """
    n_rows, n_features = features.shape
    n_components = resp.shape[1]
    counts = resp.sum(axis=0) + _EPS  # (k,), as scikit-learn

    def task(lane: _Lane, first: int, stop: int) -> None:
        lane.mahalanobis[...] = 0.0
        for start in range(first, stop, work.step):
            width = min(work.step, stop - start)
            block = features[:, start : start + width]
            squared, mu = lane.residuals[:, :width], lane.block_means[:, :width]
            variance, precision = lane.variance[:width], lane.precision[:width]
            np.matmul(resp.T, block, out=mu)
            mu /= counts[:, None]
            means[:, start : start + width] = mu
            for k in range(n_components):
                np.subtract(block, mu[k], out=squared)
                np.square(squared, out=squared)
                np.matmul(resp[:, k], squared, out=variance)
                variance /= counts[k]
                variance += reg_covar
                covariances[k, start : start + width] = variance
                np.divide(1.0, variance, out=precision)
                np.matmul(squared, precision, out=lane.share)
                lane.mahalanobis[:, k] += lane.share

    work.run(task)
    mahalanobis = work.lanes[0].mahalanobis.copy()
    for lane in work.lanes[1:]:
        mahalanobis += lane.mahalanobis
    log_det = np.sum(np.log(covariances), axis=1)  # (k,)
    weights = counts / n_rows
    weighted = -0.5 * (n_features * np.log(2 * np.pi) + log_det + mahalanobis) + np.log(weights)
    return weights, weighted


def _weighted_log_prob(features: np.ndarray, squares: np.ndarray, weights, means, covariances) -> np.ndarray:
    """``log w_k + log N(x_i | mu_k, diag(var_k))`` for every row and component, (N, k), for rows that are not
    the ones the parameters were fitted to (``predict`` of new data): the Mahalanobis terms expanded into three
    matrix products, as scikit-learn computes them (``squares`` is ``features**2``)."""
    precisions = 1.0 / covariances
    mahalanobis = (
        squares @ precisions.T - 2.0 * features @ (means * precisions).T + np.sum(means**2 * precisions, axis=1)
    )
    return -0.5 * (features.shape[1] * np.log(2 * np.pi) + np.sum(np.log(covariances), axis=1) + mahalanobis) + np.log(
        weights
    )


def _em(
    features: np.ndarray,
    responsibilities: np.ndarray,
    *,
    reg_covar: float,
    max_iter: int,
    tol: float,
    work: _Workspace | None = None,
) -> DiagonalMixture:
    """EM from initial responsibilities, in scikit-learn's order: M-step, then (E-step, M-step) until the
    mean log-likelihood of an E-step moves less than ``tol``; the returned parameters are those of the last
    M-step, and the E-step under them gives the labels and BIC of the fitted rows.

    When an E-step returns exactly the responsibilities the parameters were computed from, the M-step
    would return the same parameters and the next E-step the same likelihood (a change of 0 < tol):
    the loop stops there with the result and iteration count scikit-learn's loop reaches one step later.
    """
    if work is None:
        with _Workspace(features.shape[0], features.shape[1], responsibilities.shape[1]) as work:
            return _em(features, responsibilities, reg_covar=reg_covar, max_iter=max_iter, tol=tol, work=work)
    means, covariances = work.pair()
    resp = responsibilities
    weights, weighted = _m_then_e(features, resp, reg_covar, work, means, covariances)
    lower_bound, converged, n_iter = -np.inf, False, 0
    for n_iter in range(1, max_iter + 1):
        previous = lower_bound
        norm = logsumexp(weighted, axis=1)
        lower_bound = float(np.mean(norm))
        new_resp = np.exp(weighted - norm[:, None])
        unchanged = np.array_equal(new_resp, resp)  # then the M-step would return `params` again
        if abs(lower_bound - previous) < tol:
            converged = True
            if not unchanged:
                weights, weighted = _m_then_e(features, new_resp, reg_covar, work, means, covariances)
            break
        if unchanged and n_iter < max_iter:
            n_iter += 1  # noqa: PLW2901 - reports the iteration scikit-learn would reach, then breaks
            converged = True
            break
        resp = new_resp
        weights, weighted = _m_then_e(features, resp, reg_covar, work, means, covariances)
    mixture = DiagonalMixture(weights, means, covariances, lower_bound, n_iter, converged)
    mixture._describe_training(weighted, features.shape[0])
    return mixture


def fit_diagonal_mixture(
    features: np.ndarray,
    n_components: int,
    *,
    reg_covar: float = 1e-6,
    n_init: int = 1,
    max_iter: int = 100,
    tol: float = 1e-3,
    random_state: int | None = None,
) -> DiagonalMixture:
    """Fit a diagonal Gaussian mixture with k-means initialisation, best of ``n_init`` starts.

    Parameters
    ----------
    features : ndarray of shape (N, D)
        Finite rows; N at least ``n_components``.
    n_components : int
        Number of mixture components k.
    reg_covar, max_iter, tol
        As scikit-learn's ``GaussianMixture``: added to every variance; EM iterations per start;
        convergence threshold on the mean log-likelihood.
    n_init : int
        k-means-initialised starts; the one with the highest mean log-likelihood wins (ties: the first).
    random_state : int, optional
        Seed of the k-means++ draws.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> features = np.vstack([rng.normal(0, 1, (8, 50)), rng.normal(6, 1, (4, 50))])
    >>> mixture = fit_diagonal_mixture(features, 2, n_init=5, random_state=0)
    >>> np.bincount(mixture.predict(features)).tolist() in ([8, 4], [4, 8])
    True
    """
    features = np.asarray(features, dtype=np.float64)
    n_rows = features.shape[0]
    if not 1 <= n_components <= n_rows:
        raise ValueError(f"need 1 <= n_components <= N={n_rows}, got {n_components}")
    if n_components == 1:  # every k-means start is the sample mean
        return _em(features, np.ones((n_rows, 1)), reg_covar=reg_covar, max_iter=max_iter, tol=tol)
    rng = np.random.default_rng(random_state)
    gram = features @ features.T  # (N, N)
    gram -= gram.mean(axis=0)  # centred rows: distances
    gram -= gram.mean(axis=1)[:, None]  # do not move
    norms = np.diag(gram)
    distances = np.maximum(norms[:, None] + norms[None, :] - 2.0 * gram, 0.0)  # (N, N) squared
    with _Workspace(n_rows, features.shape[1], n_components) as work:
        best, seen = None, set()
        for _ in range(n_init):
            key = _canonical(_kmeans_labels(gram, distances, n_components, rng))
            if key in seen:  # EM from a partition already tried: the same fit, never strictly better
                continue
            seen.add(key)
            fitted = _em(
                features,
                np.eye(n_components)[np.array(key)],
                reg_covar=reg_covar,
                max_iter=max_iter,
                tol=tol,
                work=work,
            )
            if best is None or fitted.lower_bound_ > best.lower_bound_:
                if best is not None:
                    work.give_back((best.means_, best.covariances_))
                best = fitted
            else:
                work.give_back((fitted.means_, fitted.covariances_))
    assert best is not None  # n_init >= 1, and the first partition is never seen before
    return best
