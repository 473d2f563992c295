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
  E-step needs, so each EM iteration reads the (N, D) features about twice per component.

Variances are computed from centred residuals (scikit-learn expands the square, which loses precision
when a group lies far from the origin relative to its spread). The decisions are checked against
scikit-learn's on generated rounds in ``tests/test_diagmix.py``; ``solver="sklearn"`` keeps
scikit-learn's fit selectable as the reference.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

_EPS = 10 * np.finfo(np.float64).eps        # added to component weights, as scikit-learn does
_KMEANS_MAX_ITER = 300


class DiagonalMixture:
    """A fitted diagonal mixture with the parts of scikit-learn's ``GaussianMixture`` the rules read.

    Attributes ``weights_`` (k,), ``means_`` (k, D), ``covariances_`` (k, D), ``lower_bound_`` (the
    mean log-likelihood of the best start), ``n_iter_`` and ``converged_``.
    """

    def __init__(self, weights: np.ndarray, means: np.ndarray, covariances: np.ndarray,
                 lower_bound: float, n_iter: int, converged: bool):
        self.weights_ = weights
        self.means_ = means
        self.covariances_ = covariances
        self.lower_bound_ = lower_bound
        self.n_iter_ = n_iter
        self.converged_ = converged

    @property
    def n_components(self) -> int:
        return self.weights_.shape[0]

    def _weighted_log_prob(self, features: np.ndarray) -> np.ndarray:
        return _log_gaussian(features, self.means_, self.covariances_) + np.log(self.weights_)

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
        n_rows = features.shape[0]
        return -2.0 * self.score(features) * n_rows + self.n_parameters() * np.log(n_rows)


def _log_gaussian(features: np.ndarray, means: np.ndarray, covariances: np.ndarray) -> np.ndarray:
    """log N(x_i | mu_k, diag(var_k)) for every row and component, (N, k)."""
    columns = [_log_gaussian_from_residuals((features - mean) ** 2, covariance)
               for mean, covariance in zip(means, covariances)]
    return np.stack(columns, axis=1)


def _log_gaussian_from_residuals(squared: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """log N(x_i | mu, diag(var)) from the squared residuals ``(x_i - mu)^2`` (N, D) and ``var`` (D,)."""
    n_features = squared.shape[1]
    mahalanobis = squared @ (1.0 / covariance)
    return -0.5 * (n_features * np.log(2 * np.pi) + np.sum(np.log(covariance)) + mahalanobis)


def _gram_distances(gram: np.ndarray, labels: np.ndarray, n_components: int) -> np.ndarray:
    """Squared distances (N, k) from every point to the mean of each labelled group, from the Gram matrix."""
    onehot = np.eye(n_components)[labels]                       # (N, k)
    counts = onehot.sum(axis=0)                                 # (k,)
    safe = np.maximum(counts, 1.0)
    cross = gram @ onehot                                       # (N, k): sum_j in k of G_ij
    within = np.einsum("ik,ik->k", onehot, cross)               # (k,): sum_jl in k of G_jl
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
        if potential <= 0:                                      # every point sits on a centre
            centres.append(int(rng.integers(n_rows)))
            continue
        draws = rng.uniform(size=trials) * potential
        candidates = np.minimum(np.searchsorted(np.cumsum(closest), draws), n_rows - 1)
        candidate_closest = np.minimum(closest, distances[candidates])          # (trials, N)
        best = int(np.argmin(candidate_closest.sum(axis=1)))
        centres.append(int(candidates[best]))
        closest = candidate_closest[best]
    return centres


def _kmeans_labels(gram: np.ndarray, distances: np.ndarray, n_components: int,
                   rng: np.random.Generator) -> np.ndarray:
    """Lloyd's k-means from k-means++ seeds, entirely in the Gram space; labels (N,)."""
    centres = _kmeans_plus_plus(distances, n_components, rng)
    labels = np.argmin(distances[:, centres], axis=1)
    for _ in range(_KMEANS_MAX_ITER):
        to_groups = _gram_distances(gram, labels, n_components)
        empty = np.flatnonzero(np.bincount(labels, minlength=n_components) == 0)
        new = np.argmin(to_groups, axis=1)
        for group in empty:                                     # give an empty group the worst-fitted point
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


def _m_step(features: np.ndarray, resp: np.ndarray, reg_covar: float):
    """Weights, means and variances from responsibilities (N, k). A variance sums the centred squared
    residuals of the rows with a nonzero responsibility only (hard assignments, the usual case for
    N << D, read each row once in all)."""
    counts = resp.sum(axis=0) + _EPS                                            # (k,)
    means = (resp.T @ features) / counts[:, None]                               # (k, D)
    covariances = np.empty_like(means)
    for k in range(resp.shape[1]):
        rows = np.flatnonzero(resp[:, k] > 0)
        residuals = features[rows] - means[k]
        np.square(residuals, out=residuals)
        covariances[k] = resp[rows, k] @ residuals
    covariances /= counts[:, None]
    covariances += reg_covar
    return counts / features.shape[0], means, covariances


def _e_step(features: np.ndarray, squares: np.ndarray, weights, means, covariances):
    """Mean log-likelihood and log-responsibilities (N, k), as scikit-learn's E-step (the Mahalanobis
    terms expanded into three matrix products)."""
    precisions = 1.0 / covariances
    mahalanobis = (squares @ precisions.T - 2.0 * features @ (means * precisions).T
                   + np.sum(means**2 * precisions, axis=1))
    weighted = (-0.5 * (features.shape[1] * np.log(2 * np.pi) + np.sum(np.log(covariances), axis=1)
                        + mahalanobis) + np.log(weights))
    norm = logsumexp(weighted, axis=1)
    return float(np.mean(norm)), weighted - norm[:, None]


def _em(features: np.ndarray, squares: np.ndarray, responsibilities: np.ndarray, *, reg_covar: float,
        max_iter: int, tol: float) -> DiagonalMixture:
    """EM from initial responsibilities, in scikit-learn's order: M-step, then (E-step, M-step) until the
    mean log-likelihood of an E-step moves less than ``tol``.

    When an E-step returns exactly the responsibilities the parameters were computed from, the M-step
    would return the same parameters and the next E-step the same likelihood (a change of 0 < tol):
    the loop stops there with the result and iteration count scikit-learn's loop reaches one step later.
    """
    resp = responsibilities
    params = _m_step(features, resp, reg_covar)
    lower_bound, converged, n_iter = -np.inf, False, 0
    for n_iter in range(1, max_iter + 1):
        previous = lower_bound
        lower_bound, log_resp = _e_step(features, squares, *params)
        new_resp = np.exp(log_resp)
        if abs(lower_bound - previous) < tol:
            params = _m_step(features, new_resp, reg_covar)
            converged = True
            break
        if np.array_equal(new_resp, resp) and n_iter < max_iter:
            n_iter += 1
            converged = True
            break
        resp = new_resp
        params = _m_step(features, resp, reg_covar)
    return DiagonalMixture(*params, lower_bound, n_iter, converged)


def fit_diagonal_mixture(features: np.ndarray, n_components: int, *, reg_covar: float = 1e-6,
                         n_init: int = 1, max_iter: int = 100, tol: float = 1e-3,
                         random_state: int | None = None) -> DiagonalMixture:
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
    squares = features**2
    if n_components == 1:                                   # every k-means start is the sample mean
        return _em(features, squares, np.ones((n_rows, 1)), reg_covar=reg_covar, max_iter=max_iter, tol=tol)
    rng = np.random.default_rng(random_state)
    centred = features - features.mean(axis=0)              # distances do not move; precision does
    gram = centred @ centred.T                                                  # (N, N)
    norms = np.diag(gram)
    distances = np.maximum(norms[:, None] + norms[None, :] - 2.0 * gram, 0.0)   # (N, N) squared
    best, seen = None, {}
    for _ in range(n_init):
        labels = _kmeans_labels(gram, distances, n_components, rng)
        key = _canonical(labels)
        if key not in seen:
            seen[key] = _em(features, squares, np.eye(n_components)[labels], reg_covar=reg_covar,
                            max_iter=max_iter, tol=tol)
        fitted = seen[key]
        if best is None or fitted.lower_bound_ > best.lower_bound_:
            best = fitted
    return best
