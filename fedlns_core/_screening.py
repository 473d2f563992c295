"""The FedLNS screener: one call per round runs Algorithm ServerFedLNS."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ._aggregate import AggregationRule, apply_rule, normalized_weights, weighted_average
from ._bank import HistoryBank
from ._io import read_state, write_state
from ._mixture import bic_gmm_retain
from ._robust import deviation_scores, standardize
from ._signature import NormSelector, flat_signature
from ._types import (ClientId, ParamDict, check_client_id, check_global_params, client_problem,
                     count_problem, id_sort_key)

_WARMUPS = ("hold", "aggregate")


@dataclass(frozen=True)
class ScreeningResult:
    """What one round of screening decided, and why.

    Attributes
    ----------
    round : int
        Index of the screened round (0 for the screener's first call).
    active : bool
        Whether the bank had reached the activation threshold (eq. ``bank_threshold``).
    bank_size : int
        Distinct client ids in the bank after this round's refresh (``N_t^bank``).
    retained : tuple of client ids
        Clients whose updates enter the aggregate, in input order.
    rejected : dict of client id to str
        Every other participant with a reason: ``"invalid: ..."`` (unusable input, never banked) or
        ``"screened: ..."`` (removed by the mixture rule). During a ``"hold"`` warm-up, valid clients are
        neither retained nor rejected.
    scores : dict of client id to float
        Deviation score delta (eq. ``client_score``) of every screened client; empty when inactive.
    n_components : int or None
        Mixture components chosen (eq. ``choose_c``); None when nothing was screened.
    bic : dict of int to float or None
        BIC(c) of each fitted mixture (eq. ``bic``).
    labels : dict of client id to int or None
        0 for the retained component, 1 for the other.
    weights : dict of client id to float
        Aggregation coefficient alpha of each retained client (eq. ``weight``); sums to one.
    num_examples : dict of client id to float
        Example count of each retained client, as given.
    signature_keys : tuple of str
        The parameters that formed the signature.
    """

    round: int
    active: bool
    bank_size: int
    retained: tuple[ClientId, ...]
    rejected: dict[ClientId, str]
    scores: dict[ClientId, float] = field(default_factory=dict)
    n_components: int | None = None
    bic: dict[int, float] | None = None
    labels: dict[ClientId, int] | None = None
    weights: dict[ClientId, float] = field(default_factory=dict)
    num_examples: dict[ClientId, float] = field(default_factory=dict)
    signature_keys: tuple[str, ...] = ()

    def aggregate(self, global_params: ParamDict, client_params: Mapping[ClientId, ParamDict],
                  rule: AggregationRule | None = None) -> dict[str, np.ndarray]:
        """Next global model from the retained clients.

        With ``rule=None``: ``w + sum_i alpha_i (w_i - w)`` (eq. ``aggregation``). Otherwise
        ``w + rule(updates, num_examples)``, where ``updates`` maps each retained id to its update
        ``w_i - w`` and the rule returns one combined update (e.g. a coordinate-wise median), so FedLNS can
        screen in front of another aggregator. With nothing retained the global model is returned unchanged
        (eq. ``skip_update``), as new arrays.
        """
        if not self.retained:
            return {key: np.array(value, copy=True) for key, value in check_global_params(global_params).items()}
        absent = [client_id for client_id in self.retained if client_id not in client_params]
        if absent:
            raise ValueError(f"client {absent[0]!r} was retained but is missing from client_params")
        if rule is None:
            return weighted_average(global_params, client_params, self.weights)
        return apply_rule(check_global_params(global_params), client_params, self.num_examples, rule)

    def explain(self) -> str:
        """A short human-readable account of the decision."""
        lines = [f"round {self.round}: bank {self.bank_size} clients, "
                 + ("screening active" if self.active else "warming up (screening inactive)")]
        if self.n_components is not None:
            bic = ", ".join(f"BIC({c})={value:.6g}" for c, value in sorted((self.bic or {}).items()))
            lines.append(f"  mixture: {self.n_components} component(s) [{bic}]")
        lines.append(f"  retained ({len(self.retained)}): {', '.join(map(str, self.retained)) or '-'}")
        for client_id, reason in self.rejected.items():
            score = f" delta={self.scores[client_id]:.3g}" if client_id in self.scores else ""
            lines.append(f"  rejected {client_id}:{score} {reason}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; per-client maps are keyed by ``str(client_id)``."""
        def keyed(mapping):
            return None if mapping is None else {str(client_id): value for client_id, value in mapping.items()}
        return {
            "round": self.round, "active": self.active, "bank_size": self.bank_size,
            "retained": list(self.retained), "rejected": keyed(self.rejected),
            "scores": keyed(self.scores), "n_components": self.n_components,
            "bic": None if self.bic is None else {str(c): value for c, value in self.bic.items()},
            "labels": keyed(self.labels), "weights": keyed(self.weights),
            "num_examples": keyed(self.num_examples), "signature_keys": list(self.signature_keys),
        }


class FedLNS:
    """Screen federated client models by their normalization-layer changes (FedLNS).

    Each :meth:`screen` call runs one round of Algorithm ServerFedLNS: extract every valid client's
    signature (eq. ``sig_layer``), refresh the history bank *before* screening (eq. ``bank_refresh``),
    and, once the bank holds at least ``activation_threshold`` distinct ids (eq. ``bank_threshold``),
    standardize the signatures against the bank's median/MAD (eqs. ``bank_median``-``z_full``), score
    them (eq. ``client_score``) and keep the low-deviation mixture component (Algorithm BICGMMRetain).

    Parameters
    ----------
    selector : NormSelector, optional
        Which parameters form the signature; default ``NormSelector(rule="auto")``.
    activation_threshold : int, default=100
        ``M_act``: bank size at which screening starts (the paper: half of K=200 clients).
    mad_floor : float, default=1e-6
        Lower bound epsilon on each MAD coordinate (eq. ``bank_mad``).
    components : {"bic", "two"}, default="bic"
        Choose one or two mixture components by BIC, or always split in two (the paper's ablation).
    reg_covar : float, default=1e-4
        Covariance regularisation of the diagonal mixtures.
    n_init : int, default=5
        k-means-initialised restarts of the two-component mixture.
    max_iter : int, default=200
        EM iterations per mixture fit.
    ema : float in [0, 1), default=0.0
        Bank update coefficient beta; 0 is the paper's latest replacement.
    warmup : {"hold", "aggregate"}, default="hold"
        Below the threshold, ``"hold"`` retains nobody and leaves the global model unchanged (eq.
        ``skip_update``, the paper); ``"aggregate"`` averages every valid client.
    max_clients : int, optional
        Bound the bank to a uniform reservoir of this many ids (see :class:`HistoryBank`).
    random_state : int, optional
        Seed for the mixtures (and the reservoir). Round ``t`` uses a seed derived from
        ``(random_state, t)``, so decisions are reproducible and survive save/load.

    Notes
    -----
    Decisions do not depend on the order of clients or of parameter keys: both are put into a canonical
    order (ids: ints then strs, ascending; keys: sorted) before any computation. Medians use numpy's
    convention (mean of the two middle values for an even count).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> global_params = {"h.0.ln_1.weight": np.ones(64), "h.0.mlp.weight": np.zeros((4, 4))}
    >>> def client(shift):
    ...     return {"h.0.ln_1.weight": 1 + shift + 0.01 * rng.standard_normal(64),
    ...             "h.0.mlp.weight": 0.01 * rng.standard_normal((4, 4))}
    >>> screener = FedLNS(activation_threshold=10, random_state=0)
    >>> clients = {i: client(0.5 if i < 3 else 0.0) for i in range(12)}      # clients 0-2 deviate
    >>> result = screener.screen(global_params, clients, {i: 100 for i in clients})
    >>> result.active, result.retained
    (True, (3, 4, 5, 6, 7, 8, 9, 10, 11))
    >>> sorted(result.rejected)
    [0, 1, 2]
    >>> new_global = result.aggregate(global_params, clients)
    """

    def __init__(self, *, selector: NormSelector | None = None, activation_threshold: int = 100,
                 mad_floor: float = 1e-6, components: str = "bic", reg_covar: float = 1e-4,
                 n_init: int = 5, max_iter: int = 200, ema: float = 0.0, warmup: str = "hold",
                 max_clients: int | None = None, random_state: int | None = None):
        self.selector = selector
        self.activation_threshold = activation_threshold
        self.mad_floor = mad_floor
        self.components = components
        self.reg_covar = reg_covar
        self.n_init = n_init
        self.max_iter = max_iter
        self.ema = ema
        self.warmup = warmup
        self.max_clients = max_clients
        self.random_state = random_state
        self.round_ = 0
        self._bank: HistoryBank | None = None

    @property
    def bank(self) -> HistoryBank:
        """The history bank (created on first use)."""
        if self._bank is None:
            self._bank = HistoryBank(ema=self.ema, max_clients=self.max_clients, random_state=self.random_state)
        return self._bank

    # ------------------------------------------------------------------------------------------- round
    def screen(self, global_params: ParamDict, client_params: Mapping[ClientId, ParamDict],
               num_examples: Mapping[ClientId, float]) -> ScreeningResult:
        """Screen one round of returned client models.

        Parameters
        ----------
        global_params : mapping of str to ndarray
            The model broadcast this round (``w_t``). Must be finite.
        client_params : mapping of client id to (mapping of str to ndarray)
            Each participant's returned model ``w_{t,i}``, keyed by a persistent id (str or int).
        num_examples : mapping of client id to float
            Each participant's processed-example count ``n_{t,i}``.

        Returns
        -------
        ScreeningResult
            Call its :meth:`~ScreeningResult.aggregate` for the next global model.

        Raises
        ------
        TypeError, ValueError
            For caller errors: non-finite or malformed ``global_params``, a selector matching no key, an
            unsupported id type, invalid settings. Bad *client* input is never raised: the client is
            rejected with an ``"invalid: ..."`` reason and the round goes on.
        """
        self._check_params()
        if not isinstance(client_params, Mapping) or not isinstance(num_examples, Mapping):
            raise TypeError("client_params and num_examples must be mappings keyed by client id")
        global_params = check_global_params(global_params)
        selector = self.selector if self.selector is not None else NormSelector()
        keys = tuple(sorted(selector.select(global_params)))
        participants = {check_client_id(client_id): None for client_id in client_params}
        participants.update({check_client_id(client_id): None for client_id in num_examples})

        rejected: dict[ClientId, str] = {}
        valid: list[ClientId] = []
        for client_id in participants:
            if client_id not in client_params:
                problem = "num_examples given but no model"
            elif client_id not in num_examples:
                problem = "no num_examples for this client"
            else:
                problem = count_problem(num_examples[client_id]) or client_problem(
                    client_params[client_id], global_params)
            if problem:
                rejected[client_id] = f"invalid: {problem}"
            else:
                valid.append(client_id)

        canonical = sorted(valid, key=id_sort_key)                       # order-independent decisions
        signatures = np.empty((len(canonical), sum(global_params[key].size for key in keys)))
        for row, client_id in zip(signatures, canonical):                 # (N, D), eq. sig_layer
            row[:] = flat_signature(global_params, client_params[client_id], keys)
        self.bank.update_flat(canonical, signatures, keys, [global_params[key].shape for key in keys])

        round_index, self.round_ = self.round_, self.round_ + 1
        common = dict(round=round_index, bank_size=len(self.bank), signature_keys=keys)
        counts = {client_id: float(num_examples[client_id]) for client_id in valid}
        if len(self.bank) < self.activation_threshold:
            retained = tuple(valid) if self.warmup == "aggregate" else ()
            return ScreeningResult(active=False, retained=retained, rejected=rejected,
                                   weights=self._weights(retained, counts),
                                   num_examples={c: counts[c] for c in retained}, **common)
        if not canonical:
            return ScreeningResult(active=True, retained=(), rejected=rejected, **common)

        median, mad = self.bank.reference_flat(self.mad_floor)
        features = standardize(signatures, median, mad)                   # (N, D), eq. z_full
        scores = deviation_scores(features)                               # (N,), eq. client_score
        decision = bic_gmm_retain(features, scores, components=self.components, reg_covar=self.reg_covar,
                                  n_init=self.n_init, max_iter=self.max_iter,
                                  random_state=self._round_seed(round_index))
        label_of = dict(zip(canonical, decision.labels.tolist()))
        retained = tuple(client_id for client_id in valid if label_of[client_id] == 0)
        for client_id in valid:
            if label_of[client_id] != 0:
                rejected[client_id] = self._screened_reason(decision)
        return ScreeningResult(
            active=True, retained=retained, rejected=rejected,
            scores={client_id: float(score) for client_id, score in zip(canonical, scores)},
            n_components=decision.n_components, bic=decision.bic or None,
            labels={client_id: label_of[client_id] for client_id in valid},
            weights=self._weights(retained, counts), num_examples={c: counts[c] for c in retained}, **common)

    @staticmethod
    def _weights(retained, counts) -> dict[ClientId, float]:
        return normalized_weights({client_id: counts[client_id] for client_id in retained}) if retained else {}

    @staticmethod
    def _screened_reason(decision) -> str:
        kept, other = decision.cluster_scores
        if decision.fallback:
            return "screened: safety fallback kept only the lowest-deviation client"
        return f"screened: high deviation (cluster median delta {other:.3g} vs {kept:.3g})"

    def _round_seed(self, round_index: int) -> int | None:
        if self.random_state is None:
            return None
        return int(np.random.SeedSequence([self.random_state, round_index]).generate_state(1)[0])

    def _check_params(self) -> None:
        def integer(value):
            return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        if self.selector is not None and not isinstance(self.selector, NormSelector):
            raise TypeError(f"selector must be a NormSelector, got {type(self.selector).__name__}")
        if not integer(self.activation_threshold) or self.activation_threshold < 0:
            raise ValueError(f"activation_threshold must be an int >= 0, got {self.activation_threshold!r}")
        if not (isinstance(self.mad_floor, (int, float)) and np.isfinite(self.mad_floor) and self.mad_floor > 0):
            raise ValueError(f"mad_floor must be a positive finite number, got {self.mad_floor!r}")
        if self.components not in ("bic", "two"):
            raise ValueError(f"components must be 'bic' or 'two', got {self.components!r}")
        if not (isinstance(self.reg_covar, (int, float)) and self.reg_covar >= 0):
            raise ValueError(f"reg_covar must be a number >= 0, got {self.reg_covar!r}")
        for name in ("n_init", "max_iter"):
            value = getattr(self, name)
            if not integer(value) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.warmup not in _WARMUPS:
            raise ValueError(f"warmup must be one of {_WARMUPS}, got {self.warmup!r}")
        if self.random_state is not None and not integer(self.random_state):
            raise TypeError(f"random_state must be an int or None, got {type(self.random_state).__name__}")
        if self.max_clients is not None and integer(self.max_clients) \
                and self.max_clients < self.activation_threshold:
            raise ValueError(f"max_clients={self.max_clients} is below activation_threshold="
                             f"{self.activation_threshold}: screening could never start")
        bank = self.bank
        bank.ema, bank.max_clients, bank.random_state = self.ema, self.max_clients, self.random_state
        bank._check_params()

    # ------------------------------------------------------------------------------------- persistence
    def get_params(self) -> dict[str, Any]:
        """The constructor settings (the selector as a plain dict)."""
        return {
            "selector": None if self.selector is None else self.selector.to_config(),
            "activation_threshold": self.activation_threshold, "mad_floor": self.mad_floor,
            "components": self.components, "reg_covar": self.reg_covar, "n_init": self.n_init,
            "max_iter": self.max_iter, "ema": self.ema, "warmup": self.warmup,
            "max_clients": self.max_clients, "random_state": self.random_state,
        }

    def save(self, path) -> None:
        """Write settings, history bank and round counter to ``path`` (``.npz``; atomic; no pickle)."""
        self._check_params()
        bank_header, arrays = self.bank._state()
        params = json.loads(json.dumps(self.get_params(), default=_plain))
        write_state(path, "screener", {"params": params, "round": self.round_, "bank": bank_header}, arrays)

    @classmethod
    def load(cls, path) -> "FedLNS":
        """Read a screener written by :meth:`save`; ``ValueError`` for a corrupt or foreign file."""
        header, arrays = read_state(path, "screener")
        try:
            params = dict(header["params"])
            if params["selector"] is not None:
                params["selector"] = NormSelector(**params["selector"])
            screener = cls(**params)
            screener._check_params()
            screener.round_ = int(header["round"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: invalid screener state ({error})") from error
        screener._bank = HistoryBank._from_state(header["bank"], arrays, path)
        return screener

    def __repr__(self) -> str:
        changed = {name: value for name, value in self.get_params().items()
                   if value != _DEFAULTS.get(name)}
        return f"FedLNS({', '.join(f'{name}={value!r}' for name, value in changed.items())})"


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot save setting of type {type(value).__name__}")


_DEFAULTS = FedLNS().get_params()
