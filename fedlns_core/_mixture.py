"""The BIC-guided one-vs-two-component retain rule (Algorithm BICGMMRetain)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from threadpoolctl import ThreadpoolController

from ._diagmix import DiagonalMixture, fit_diagonal_mixture
from ._settings import options

_COMPONENTS = options("components")
#: Mixture solvers: ``"fast"`` (:func:`fit_diagonal_mixture`, built for N << D) and ``"sklearn"``
#: (scikit-learn's ``GaussianMixture``, the reference).
SOLVERS = options("mixture_solver")
_THREADPOOLS = None


def _single_threaded():
    # k-means and EM over N ~ 20 rows are too small to pay for OpenMP/BLAS synchronisation: measured
    # here, one thread fits the two-component mixture ~3x faster (and faster at N=1000 too).
    global _THREADPOOLS  # noqa: PLW0603 - one controller per process, built on first use
    if _THREADPOOLS is None:
        _THREADPOOLS = ThreadpoolController()
    return _THREADPOOLS.limit(limits=1)


@dataclass(frozen=True)
class MixtureDecision:
    """Outcome of :func:`bic_gmm_retain` for N clients."""

    n_components: int  # c-hat (eq. choose_c), or 2 when forced
    bic: dict[int, float]  # BIC(c) for each fitted c (eq. bic)
    labels: np.ndarray  # (N,) 0 = retained component, 1 = the other
    cluster_scores: tuple[float, float] | None  # (rho_retained, rho_other) (eq. cluster_score)
    fallback: bool  # True when the safety fallback chose argmin delta


def fit_mixture(
    features: np.ndarray,
    n_components: int,
    *,
    reg_covar: float,
    n_init: int,
    max_iter: int,
    random_state: int | None,
    solver: str = "fast",
) -> GaussianMixture | DiagonalMixture:
    """Diagonal GMM with k-means initialisation (eqs. ``gmm_density``, ``mle``) by one of :data:`SOLVERS`.

    Both solvers fit the same model by the same steps (k-means++ seeded Lloyd, EM, tolerance 1e-3, best
    of ``n_init``); their k-means draws differ, so where starts reach different local optima the chosen
    fit can differ too (``tests/test_diagmix.py`` counts how often).
    """
    if solver == "fast":
        with _single_threaded():
            return fit_diagonal_mixture(
                features, n_components, reg_covar=reg_covar, n_init=n_init, max_iter=max_iter, random_state=random_state
            )
    if solver != "sklearn":
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    mixture = GaussianMixture(
        n_components=n_components,
        covariance_type="diag",
        reg_covar=reg_covar,
        n_init=n_init,
        max_iter=max_iter,
        init_params="kmeans",
        random_state=random_state,
    )
    with warnings.catch_warnings(), _single_threaded():
        # Duplicate feature rows make k-means warn about fewer distinct clusters; the BIC then decides.
        warnings.filterwarnings("ignore", message="Number of distinct clusters", category=ConvergenceWarning)
        mixture.fit(features)
    return mixture


def _training_bic(mixture, features: np.ndarray) -> float:
    if isinstance(mixture, DiagonalMixture) and mixture.bic_ is not None:  # computed by the fit
        return mixture.bic_
    return float(mixture.bic(features))


def bic_gmm_retain(
    features: np.ndarray,
    scores: np.ndarray,
    *,
    components: str = "bic",
    reg_covar: float = 1e-4,
    n_init: int = 5,
    max_iter: int = 200,
    random_state: int | None = None,
    solver: str = "fast",
) -> MixtureDecision:
    """Choose one or two diagonal Gaussian components by BIC and keep the low-deviation group.

    Parameters
    ----------
    features : ndarray of shape (N, D)
        Standardized signatures ``Z_t`` (eq. ``feature_matrix``).
    scores : ndarray of shape (N,)
        Deviation scores ``delta_i`` (eq. ``client_score``).
    components : {"bic", "two"}
        ``"bic"`` compares BIC(1) and BIC(2) (eq. ``choose_c``; ties keep one component);
        ``"two"`` always splits (the paper's ablation).
    reg_covar, n_init, max_iter, random_state
        Settings of the mixture fits (as :class:`sklearn.mixture.GaussianMixture`'s). The one-component
        fit uses a single initialisation: every k-means start of one cluster is the sample mean, so more
        starts give the identical fit.
    solver : {"fast", "sklearn"}, default="fast"
        Which implementation fits the mixtures (:func:`fit_mixture`).

    Returns
    -------
    MixtureDecision
        Labels are 0 for the retained component (smaller median deviation, eqs. ``cluster_score`` to
        ``retained_set``) and 1 for the other.

    Notes
    -----
    BIC is ``-2 log L + p_c log N`` (scikit-learn's ``GaussianMixture.bic``) with ``p_c = (c-1) + 2cD``
    free parameters for diagonal covariances (eqs. ``bic``, ``num_params``). Two components cannot be
    fitted to fewer than two distinct feature rows; then one component is chosen with either setting
    (there is nothing to split) and everyone is kept.
    """
    if components not in _COMPONENTS:
        raise ValueError(f"components must be one of {_COMPONENTS}, got {components!r}")
    n_clients = features.shape[0]
    if n_clients == 0:
        raise ValueError("bic_gmm_retain needs at least one client")
    if not np.isfinite(features).all() or not np.isfinite(scores).all():
        raise ValueError("bic_gmm_retain needs finite features and scores")
    if n_clients == 1:  # scikit-learn fits nothing to one sample: keep the client
        return MixtureDecision(1, {}, np.zeros(1, dtype=int), None, False)
    all_identical = bool((features == features[0]).all())
    fit: dict[str, Any] = dict(reg_covar=reg_covar, max_iter=max_iter, random_state=random_state, solver=solver)
    bic: dict[int, float] = {}
    if components == "bic":
        bic[1] = _training_bic(fit_mixture(features, 1, n_init=1, **fit), features)
        if not np.isfinite(bic[1]):
            raise ValueError(f"the one-component BIC is not finite ({bic[1]}); refusing to decide")
    if all_identical:
        return MixtureDecision(1, bic, np.zeros(n_clients, dtype=int), None, False)
    two = fit_mixture(features, 2, n_init=n_init, **fit)
    bic[2] = _training_bic(two, features)
    if not all(np.isfinite(value) for value in bic.values()):
        # Fail closed: a NaN comparison would keep one component, i.e. everyone.
        raise ValueError(f"the mixture's BIC is not finite ({bic}); refusing to decide")
    if components == "bic" and bic[1] <= bic[2]:
        return MixtureDecision(1, bic, np.zeros(n_clients, dtype=int), None, False)

    component = two.labels_ if isinstance(two, DiagonalMixture) else two.predict(features)  # eq. label
    rho = [
        float(np.median(scores[component == k])) if np.any(component == k) else np.inf for k in (0, 1)
    ]  # eq. cluster_score
    keep = int(np.argmin(rho))  # eq. keep_cluster (ties: first)
    labels = np.where(component == keep, 0, 1)
    fallback = not np.any(labels == 0)
    if fallback:  # safety fallback: keep argmin delta
        labels = np.ones(n_clients, dtype=int)
        labels[int(np.argmin(scores))] = 0
    return MixtureDecision(2, bic, labels, (rho[keep], rho[1 - keep]), fallback)
