"""The FedLNS screener: one call per round runs Algorithm ServerFedLNS."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._aggregate import Aggregator, apply_aggregator, normalized_weights, weighted_average
from ._bank import HistoryBank
from ._cohort import CohortGraph, cohort_rule
from ._io import read_state, write_state
from ._mixture import bic_gmm_retain
from ._robust import MAX_DEVIATION, deviation_scores, largest_deviations, standardize
from ._rules import bank_rule
from ._settings import PARAMETER_CONSTRAINTS, SELECTOR_CONSTRAINTS, validate_settings
from ._signature import NormSelector, SignatureLayout, signature_layout
from ._support import ROUND_KEY, SKETCH_KEY, clip_scales, sketch_updates, support_rule
from ._types import (
    ClientId,
    ParamDict,
    check_client_id,
    check_global_params,
    client_problem,
    escape_text,
    id_sort_key,
    read_count,
)


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
        Example count of each retained client as used for its weight: as given, or capped at
        ``max_count_ratio`` times the median count of the retained clients.
    signature_keys : tuple of str
        The signature's entries: parameter names (norm signature) and ``"<factor> column norms"`` /
        ``"<factor> row norms"`` (LoRA signature).
    signature : str
        ``"norm"``, ``"lora"`` or ``"lora+norm"``: what the signature held this round.
    deviant_entries : dict of client id to str
        For each screened and rejected client, the signature entry it deviates most in (largest mean absolute
        standardized value): which layer's change gave it away.
    capped_counts : dict of client id to float
        The count each retained client gave, for those whose count was capped.
    support : dict of client id to float
        ``retain_rule="cohort"``: each screened client's mean update-sketch cosine to the other clients the
        round kept; ``"support"``: to the population's majority group of recent bank entries (its own left
        out); empty otherwise.
    clip_scales : dict of client id to float
        ``clip="median"``: the factor (at most 1) each retained update is scaled by in :meth:`aggregate`, so
        that none is longer than the retained clients' median update; empty otherwise.
    held : bool
        ``quorum``: the screen kept fewer than ``quorum`` of the round's screened clients, so nobody is retained
        (the clients it kept are in ``rejected`` with a reason starting ``"held:"``; ``labels`` keep its decision).
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
    signature: str = ""
    deviant_entries: dict[ClientId, str] = field(default_factory=dict)
    capped_counts: dict[ClientId, float] = field(default_factory=dict)
    support: dict[ClientId, float] = field(default_factory=dict)
    clip_scales: dict[ClientId, float] = field(default_factory=dict)
    held: bool = False

    def aggregate(
        self,
        global_params: ParamDict,
        client_params: Mapping[ClientId, ParamDict],
        aggregator: Aggregator | None = None,
        *,
        rule: Aggregator | None = None,
    ) -> dict[str, np.ndarray]:
        """Next global model from the retained clients.

        With ``aggregator=None``: ``w + sum_i alpha_i c_i (w_i - w)`` (eq. ``aggregation``, with the clipping
        factors ``c_i`` of :attr:`clip_scales`, 1 where there are none). Otherwise
        ``w + aggregator(updates, num_examples)``, where ``updates`` maps each retained id to its update
        ``w_i - w`` (clipped first) and the aggregator returns one combined update (e.g. a coordinate-wise
        median), so FedLNS can screen in front of another aggregator. With nothing retained the global model
        is returned unchanged (eq. ``skip_update``), as new arrays. ``rule=`` is the deprecated name of
        ``aggregator=`` (a ``FutureWarning``).
        """
        if rule is not None:
            warnings.warn(
                "ScreeningResult.aggregate(rule=...) is now aggregate(aggregator=...); rule= will be removed",
                FutureWarning,
                stacklevel=2,
            )
            aggregator = aggregator if aggregator is not None else rule
        if aggregator is not None and not callable(aggregator):
            hint = (
                " (the weights are the screened round's num_examples: pass none here)"
                if isinstance(aggregator, Mapping)
                else ""
            )
            raise TypeError(
                f"aggregator must be a callable aggregator(updates, num_examples) -> update, got "
                f"{type(aggregator).__name__}{hint}"
            )
        if not self.retained:
            return {key: np.array(value, copy=True) for key, value in check_global_params(global_params).items()}
        absent = [client_id for client_id in self.retained if client_id not in client_params]
        if absent:
            raise ValueError(f"client {absent[0]!r} was retained but is missing from client_params")
        if aggregator is None:
            return weighted_average(global_params, client_params, self.weights, scales=self.clip_scales or None)
        return apply_aggregator(
            check_global_params(global_params),
            client_params,
            self.num_examples,
            aggregator,
            scales=self.clip_scales or None,
        )

    def explain(self) -> str:
        """A short human-readable account of the decision."""
        lines = [
            f"round {self.round}: bank {self.bank_size} clients, "
            + ("screening active" if self.active else "warming up (screening inactive)")
            + (f", {self.signature} signature of {len(self.signature_keys)} entries" if self.signature else "")
        ]
        if self.n_components is not None:
            bic = ", ".join(f"BIC({c})={value:.6g}" for c, value in sorted((self.bic or {}).items()))
            lines.append(f"  mixture: {self.n_components} component(s) [{bic}]")
        retained = ", ".join(_shown(client_id) for client_id in self.retained)
        lines.append(f"  retained ({len(self.retained)}): {retained or '-'}")
        if self.held:
            lines.append("  held: the screen kept fewer of the round than the quorum, so nobody is aggregated")
        for client_id, reason in self.rejected.items():
            score = f" delta={self.scores[client_id]:.3g}" if client_id in self.scores else ""
            if client_id in self.support:
                score += f" support={self.support[client_id]:.3g}"
            entry = (
                f" (largest deviation in {escape_text(self.deviant_entries[client_id], 120)})"
                if client_id in self.deviant_entries
                else ""
            )
            lines.append(f"  rejected {_shown(client_id)}:{score} {escape_text(reason, 400)}{entry}")
        for client_id, given in self.capped_counts.items():
            lines.append(f"  capped count of {_shown(client_id)}: {given:.6g} -> {self.num_examples[client_id]:.6g}")
        clipped = {client_id: scale for client_id, scale in self.clip_scales.items() if scale < 1}
        if clipped:
            lines.append(
                "  clipped to the retained median update: "
                + ", ".join(f"{_shown(client_id)} x{scale:.3g}" for client_id, scale in clipped.items())
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON form (``json.dumps(..., allow_nan=False)`` accepts it).

        Per-client maps become lists of ``[client_id, value]`` pairs, each id keeping its JSON type
        (``1`` and ``"1"`` stay two clients); a non-finite number is written as ``null``.
        """

        def pairs(mapping):
            return None if mapping is None else [[client_id, _plain(value)] for client_id, value in mapping.items()]

        return {
            "round": self.round,
            "active": self.active,
            "bank_size": self.bank_size,
            "retained": list(self.retained),
            "rejected": pairs(self.rejected),
            "scores": pairs(self.scores),
            "n_components": self.n_components,
            "bic": None if self.bic is None else {str(c): _plain(value) for c, value in self.bic.items()},
            "labels": pairs(self.labels),
            "weights": pairs(self.weights),
            "num_examples": pairs(self.num_examples),
            "capped_counts": pairs(self.capped_counts),
            "signature_keys": list(self.signature_keys),
            "signature": self.signature,
            "deviant_entries": pairs(self.deviant_entries),
            "support": pairs(self.support),
            "clip_scales": pairs(self.clip_scales),
            "held": self.held,
        }


#: The paper-family retain rule measured best for each round size (the rule study, docs/rules.md): (largest
#: round size, settings); :func:`rule_for_round_size` looks it up. Each entry is the study's choice
#: (``benchmarks/rule_study.py``, made on its selection seeds by a rule fixed in advance) at the measured size
#: it covers: 2, 4, 5, 10 and 20 per round.
RULE_BY_ROUND_SIZE: tuple = (
    (2, dict(retain_rule="bank", min_separation=0.0)),  # measured at K=10, 2 per round
    (4, dict(retain_rule="peeled", min_separation=3.0)),  # K=20, 4 per round
    (7, dict(retain_rule="peeled", min_separation=2.0)),  # K=50, 5 per round
    (14, dict(retain_rule="guarded", lone_separation=3.0, min_separation=1.0)),  # K=100, 10 per round
    (None, dict(retain_rule="guarded", lone_separation=3.0, min_separation=0.0)),  # K=200, 20 per round
)


def rule_for_round_size(clients_per_round: int) -> dict[str, Any]:
    """The paper-family retain rule of :data:`RULE_BY_ROUND_SIZE` for rounds of ``clients_per_round``.

    Examples
    --------
    >>> rule_for_round_size(4)
    {'retain_rule': 'peeled', 'min_separation': 3.0}
    """
    return dict(next(rule for largest, rule in RULE_BY_ROUND_SIZE if largest is None or clients_per_round <= largest))


#: The quantile of the round's update norms every update is clipped to while everyone is averaged (warm-up).
WARMUP_CLIP_QUANTILE = 0.25

#: The fewest clients per round for which :meth:`FedLNS.for_federation` plans the ``"cohort"`` rule; smaller rounds
#: give it too little to cut (tests/test_cohort.py measures it) and get the ``"support"`` rule.
COHORT_MIN_ROUND = 8

#: The retain rules that bank a sketch of each client's full update beside its signature (``fedlns_core._support``).
SKETCHING_RULES = ("cohort", "support")

#: The paper's configuration (``FedLNS.paper()``): its retain rule, its warm-up hold, no clipping.
PAPER_SETTINGS = dict(signature="norm", retain_rule="paper", warmup="hold", clip=None, activation_threshold=100)


class FedLNS:
    """Screen federated client models against the population's history (FedLNS and its robust default).

    Each :meth:`screen` call runs one round of Algorithm ServerFedLNS: extract every valid client's
    signature (eq. ``sig_layer``), refresh the history bank *before* screening (eq. ``bank_refresh``),
    and, once the bank holds at least ``activation_threshold`` distinct ids (eq. ``bank_threshold``),
    standardize the signatures against the bank's median/MAD (eqs. ``bank_median``-``z_full``), score
    them (eq. ``client_score``) and decide by the retain rule.

    The default rule, ``"cohort"``, also sketches each client's full update, cuts the round in two where its
    updates fall into parts apart from each other, and rejects the part whose clients the population's history
    (a signed graph of which ids sided with which) places outside its majority (``fedlns_core._cohort``); it
    rejects loud normalization changes and clips the retained updates to their median norm. The paper's rule
    keeps attackers that send back the normalization parameters they received (``docs/attacks.md``).
    :meth:`paper` gives the paper's exact method (Algorithm BICGMMRetain, the warm-up hold, no clipping);
    :meth:`for_federation` plans the activation threshold for a federation's size.

    Parameters
    ----------
    signature : {"auto", "norm", "lora"}, default="auto"
        What is banked and screened for each client. ``"norm"``: the change of its normalization parameters
        (eq. ``sig_layer``, the paper's). ``"lora"``: the LoRA signature, the column norms of the change of
        every LoRA ``A`` factor and the row norms of the change of every ``B`` (``docs/concepts.md``), for
        adapter payloads. ``"auto"``: what the history bank already holds, else, at the first round, the LoRA
        signature where the payload holds LoRA factors, the norms where it holds norms, both where both
        (beside LoRA factors the norms count only when at least half of the round's clients changed them:
        frozen norms sent back unchanged carry nothing).
    selector : NormSelector, optional
        Which parameters are the normalization parameters; default ``NormSelector(match="auto")``.
    activation_threshold : int, default=100
        ``M_act``: bank size at which screening starts (the paper: half of K=200 clients); for the
        ``"cohort"`` and ``"support"`` rules also how many of the most recent bank entries the loud test reads
        (and ``"support"`` groups). Plan it for your federation with :meth:`for_federation`.
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
    mixture_solver : {"fast", "sklearn"}, default="fast"
        Who fits the mixtures: ``"fast"``, this library's diagonal mixture for few clients in many
        dimensions (k-means in the N x N Gram space, one EM run per distinct k-means partition), or
        ``"sklearn"``, scikit-learn's ``GaussianMixture``, the reference. Same model, same settings; the
        k-means draws differ (``docs/performance.md`` measures the agreement).
    ema : float in [0, 1), default=0.0
        Bank update coefficient beta; 0 is the paper's latest replacement.
    warmup : {"aggregate", "hold", "screen"}, default="aggregate"
        Below the threshold, ``"aggregate"`` averages every valid client (clipped as ``clip`` says);
        ``"hold"`` retains nobody and leaves the global model unchanged (eq. ``skip_update``, the paper);
        ``"screen"`` (``"cohort"`` and ``"support"``) screens from the first round against the entries the
        bank has.
    max_count_ratio : float >= 1 or None, default=10.0
        Cap on a retained client's example count: at most this many times the median count of the
        round's retained clients (None: no cap). Counts within the cap give the paper's weights
        (eq. ``weight``) unchanged; a larger claim is weighted as the cap.
    max_clients : int, optional
        Bound the bank to a uniform reservoir of this many ids (see :class:`HistoryBank`).
    random_state : int >= 0, optional
        Seed for the mixtures (and the reservoir). Round ``t`` uses a seed derived from
        ``(random_state, t)``, so decisions are reproducible and survive save/load.
    retain_rule : {"cohort", "support", "paper", "guarded", "peeled", "bank"}, default="cohort"
        ``"cohort"`` is described above and in ``fedlns_core._cohort``. ``"paper"`` keeps the low-deviation
        component of the BIC-chosen mixture (Algorithm BICGMMRetain). The others are not in the paper; they were
        measured against it in ``docs/rules.md`` and read the bank's own scores (bank entries standardized like
        the round), whose benign part gives a width to measure separations in:

        * ``"guarded"``: the paper's mixture, but a component of one client never decides: that client
          is rejected only when its score is ``lone_separation`` benign widths above the bank's benign
          centre, and the mixture is refitted to the others;
        * ``"peeled"``: the paper's mixture, applied again to the clients it kept until it rejects no
          one, each split undone when the groups' median scores are less than ``min_separation`` benign
          widths apart (an extreme decoy cannot hide moderate attackers);
        * ``"bank"``: the round's clients judged against a one-vs-two-component mixture of the bank's
          scores (hundreds of points, however small the round), a split of the bank closer than
          ``min_separation`` widths ignored.

        They remove most false rejections in clean and small rounds; :meth:`for_federation` picks one
        by round size.

        * ``"support"`` (``fedlns_core._support``, the default before ``"cohort"``): group the
          ``activation_threshold`` most recent bank entries by the cosines of their full-update sketches;
          reject a client closer to a group separated from the majority group than to the majority, or whose
          normalization change is loud (``loud_separation``). It compares updates across rounds, which fails
          where honest updates of different rounds do not agree (LoRA fine-tuning,
          ``docs/results/lora-matrix/lockin``); :meth:`for_federation` picks it for rounds of fewer than
          ``COHORT_MIN_ROUND`` (8) clients, which give the cohort rule too little to cut.
    lone_separation : float >= 0, default=3.0
        ``"guarded"`` only: how far above the bank's benign scores a lone client must lie to be rejected,
        in standard deviations of those scores.
    min_separation : float >= 0, default=0.0
        ``"guarded"``, ``"peeled"`` and ``"bank"``: a split whose groups' median scores differ by less than
        this many benign widths keeps everyone (for ``"guarded"``, splits into groups of two or more).
    separation : float in (0, 1), default=0.5
        ``"cohort"``: a group of the round's clients is apart from the rest when their mean cosine is below
        this share of the group's own (and, with ``cohort_cut="significant"``, the cut is wider than chance);
        ``"support"``: a group of recent bank entries is separated from the majority group when their mean cosine
        is below this share of the majority's own.
    max_groups : int >= 2, default=4
        ``"support"`` only: the most groups the recent bank entries are cut into.
    loud_separation : float > 0, default=6.0
        ``"cohort"`` and ``"support"``: robust widths (1.4826 MAD of the bank's scores) above their median at which a
        normalization change is loud.
    cohort_decay : float in (0, 1], default=0.9
        ``"cohort"`` only: the factor the cohort graph's evidence is multiplied by each round (0.9: a round's
        edges weigh half after about 7 rounds), so a client's standing follows what it sends now.
    cohort_undecided : {"adaptive", "support", "keep", "hold", "deviation", "hold_contested"}, default="adaptive"
        ``"cohort"`` only: a round that falls into parts apart while no cohort of the history holds more than
        half of the bank's ids. ``"adaptive"`` (the default since ``docs/results/adaptive``): where the recent bank's
        update sketches of different rounds agree (median cosine at least ``fedlns_core._cohort.CONSISTENT_HISTORY``,
        0.15: honest updates share a direction from round to round, as in a model trained from scratch) as
        ``"support"``, else (LoRA adapters, whose updates agree across rounds at chance) as ``"hold_contested"``.
        ``"support"`` (the default before it): decided by the support rule (the recent bank's groups of sketches;
        ``max_groups`` applies), which in the LoRA scenario keeps the one coherent group it finds, the attackers
        of a round they hold. ``"hold_contested"``: as ``"support"``, but such a round is held when its coherent
        part agrees at least ``STRONG_CUT`` and holds at least half of it (``fedlns_core._cohort.contested``), and
        so is a decided round whose two parts both vote negative (``docs/results/contested``: in the ``cpu`` preset,
        where the support rule decides such rounds correctly, holding them costs 5-8%). ``"keep"``: kept whole
        (attackers apart only in the rounds they hold, ``majority_only``, are then kept there); ``"hold"``: not
        aggregated at all, which also holds the honest clients of split clean non-IID rounds
        (``docs/results/cohort``); ``"deviation"``, a candidate that failed its measurement, kept so that it
        re-runs: the smaller part is rejected when its scores all lie above or all below the rest's and further by
        ratio from the recent bank's median score, else everyone is kept (in a round the attackers held it rejected
        the honest part, ``docs/results/gpu-paper``).
    cohort_cut : {"tree", "significant", "confirmed", "centered"}, default="confirmed"
        ``"cohort"`` only: which cuts of a round count. ``"tree"``: every group the average-linkage tree finds
        that is coherent and apart (``separation``). ``"significant"``: only a cut wider than the cut the tree
        makes in 99 simulated rounds of exchangeable clients as alike as the round's (``docs/concepts.md``). It
        stops the false cuts of weakly agreeing honest updates (a small masked model's LoRA updates: 39-41% of
        honest BERT updates rejected without attackers under ``"tree"``, none under it), but gives white-box
        attackers room: blended with honest updates, their cut stays under chance (``docs/results/cut-test``).
        ``"confirmed"``: the tree's cuts, and in a round without one, the group that agrees more within than with
        the rest and that the history (the cohort graph before the round) places outside the majority cohort, at
        least two of it in the minority and nobody else there, is rejected too (no edges added): updates of a model
        trained from scratch share so much that honest and corrupted ones are rarely apart by ``separation``
        (BERT, ``docs/results/confirmed-cut``). The default since it met its plan's criteria on every matrix;
        ``"tree"`` is the default before it. ``"centered"`` (a candidate, not yet measured beyond one testbed):
        as ``"confirmed"``, but a round without a cut is first cut again with the direction all its updates
        share removed (each sketch minus the round's median, the significance test applied), a cut that adds
        edges and votes; at the `paper` preset's scale the tree found no parts apart in most rounds and the
        history placed nobody, so ``"confirmed"`` kept the attackers (``docs/results/gpu-paper``).
    cohort_vote : {"settled", "round", "history", "strong", "placed"}, default="settled"
        ``"cohort"`` only: which graph the parts' votes read their members' sides from. ``"round"`` (the default
        before ``docs/results/placed-vote``): the graph with the round's own edges in it, so a client seen for the
        first time is placed by whom it sided with, and so is everyone: the cut being decided also votes.
        ``"history"``: the graph before the round's edges; only ids it leaves unplaced are placed with them, so a
        cut never confirms itself (``docs/concepts.md``). ``"strong"``: ``"history"`` for weak cuts, ``"round"``
        for a cut whose core agrees at mean cosine 0.5 or more (``fedlns_core._cohort.STRONG_CUT``): attackers that
        poison after an honest history (``sleeper``) cut strongly, the false cuts of honest clients weakly.
        ``"placed"``: ``"strong"``, except that a weak cut places nobody, so its ids that the history leaves
        unplaced vote 0 instead of being put on the side the cut itself gives them (in non-IID rounds with one
        attacker, weak cuts between honest clients otherwise put the unplaced ones in the minority and reject most
        of the round). Under ``"placed"`` a history that has placed nobody yet leaves every weak cut's vote at 0,
        so the round goes to ``cohort_undecided``'s fallback, which can keep attackers whose cores agree weakly
        (``tests/test_cohort.py``). ``"settled"`` (the default): ``"placed"`` once the graph before the round holds
        a majority cohort, ``"round"`` before; in the LoRA scenario at 20% it rejected a quarter of the honest
        updates ``"round"`` rejected and kept every GPT and LLaMA cell within 1% of FedAvg, and elsewhere it stayed
        within 0.8% of ``"round"`` (``docs/results/placed-vote``). A screener saved before the setting existed
        loads with ``"round"``.
    cohort_weight : {"agreeing", "unit", "coherence"}, default="agreeing"
        ``"cohort"`` only: what a split round's edges weigh in the cohort graph. ``"unit"`` (the default before
        ``docs/results/adaptive``): +1 and -1 whatever the cut. ``"coherence"`` (a candidate,
        ``docs/results/cohort-weight``): the cut's core mean cosine within (clipped to [0, 1]), so that the weak cuts
        the tree makes among honest clients that agree little (mean cosine 0.1-0.25 within) weigh a fraction of a cut of
        attackers sending one direction (0.7-1.0), and a group that wants light edges has to send updates that disagree
        with each other. ``"agreeing"`` (the default, ``docs/results/cohort-agree``): a strong cut (core mean cosine 0.5
        or more, ``STRONG_CUT``) weighs 1; a weak one adds its edge only between two clients whose own cosine in the
        round agrees with it (same part and above the round's median pair cosine, or different parts and below it), so
        that a weak cut of a few honest clients against the rest does not join the attackers in the rest with the honest
        clients there (``weak_core``).
    cohort_margin : float in [0, 1], default=0.0
        ``"cohort"`` only: a cut round's lower part is rejected only where its vote (the sum of its members' sides:
        +1 majority cohort, -1 minority, 0 unplaced) is at most ``-cohort_margin`` times its size. 0 (the default):
        any negative vote. In the LoRA scenario without attackers, a weak cut whose part the history places half and
        half, a vote of -1 of 8, rejected 8 honest clients; a margin leaves a part the history cannot tell apart, at
        the price of attackers mixed with honest clients in one part: opt-in, since ``margin_blend``, written against
        it, put ``cohort_margin=0.5`` 7.1% behind 0 on GPT at 40% (``docs/results/margin``).
    cohort_balance : float in [0, 1], default=0.0
        ``"cohort"`` only: the cohort graph places ids in a majority and a minority cohort only where its split is
        balanced, the share of its edge weight that agrees with the split (a positive edge within a side, a negative one
        across) less the share that does not at least this (``CohortGraph.balance``); else the round is decided as one
        whose history has no majority cohort (``cohort_undecided``). Two kinds the rounds' cuts keep apart give 1.00
        (target corruption in the LoRA scenario); cuts that fall anywhere, among honest clients alone (0.53-0.63) or set
        across them by an attacker (``minority_flip``: 0.47-0.67), give a split that says nothing of who is honest, and
        votes on it reject honest clients. 0 (the default) reads every split. Measured with ``cohort_open="keep"`` at
        0.8 (``docs/results/balance``): ``minority_flip`` within 1% of FedAvg in all nine cells (seeds 100-400, three
        families; the default: up to 8.9% above it), no honest update rejected without attackers, never more than 1%
        worse than the default in the study's 40 cells (after it, ``majority_drift`` on GPT: 1.6%); but ``victim_flip``,
        written against it (roles fixed by id, so that its cuts build a balanced, wrong graph), ends it 1.1-2.0% above
        FedAvg in three cells of five: opt-in.
    cohort_contested : {"hold", "reject"}, default="hold"
        ``"cohort"`` only, under ``cohort_undecided="hold_contested"`` (and ``"adaptive"`` where it acts as it): what a
        contested round does, one whose coherent part agrees at least ``STRONG_CUT`` and holds at least half of it
        while no cohort of the history holds more than half of the bank's ids (``fedlns_core._cohort.contested``).
        ``"hold"`` (the default): aggregate nobody. ``"reject"`` (a candidate): reject the coherent part and keep the
        other, since honest LoRA updates that the tree cuts into a part agree weakly (cores of 0.10-0.15,
        ``docs/results/cohort-vote``) and a held round loses the honest clients' progress (``agree_blend``: every
        held round of GPT at 40%, seed 300, held five attackers against five honest clients). Measured
        (``docs/results/contested-reject``): within 1% of FedAvg under ``agree_blend`` in 3 of 4 cells against 1, but
        ``contest_flip``, written against it (attackers sending the honest mean so that the honest clients are the
        contested part), put it 1.8% behind ``"hold"`` on LLaMA at 40%: opt-in.
    cohort_strong_minority : {"support", "reject"}, default="support"
        ``"cohort"`` only, under ``cohort_undecided="hold_contested"`` (and ``"adaptive"`` where it acts as it): what a
        round whose coherent part agrees at least ``STRONG_CUT`` but holds less than half of it does while no cohort of
        the history holds more than half of the bank's ids. ``"support"`` (the default): the support rule decides, as
        any such round that is not contested; in a drifting history it can keep the coherent part alone (ALIE at 20% in
        the LoRA scenario, the first screened rounds: three attackers sending one update kept, seven honest clients
        rejected). ``"reject"``: reject that part, since honest LoRA updates that the tree cuts into a part agree
        weakly (``docs/results/cohort-vote``). Measured (``docs/results/strong-minority``): no round of attackers only
        under ALIE at 20% where ``"support"`` has three, but ``minority_flip``, written against it (attackers that
        make a few honest clients such a part), put it 1.2-2.4% behind ``"support"`` at 40%: opt-in.
    cohort_open : {"support", "keep"}, default="support"
        ``"cohort"`` only, under ``cohort_undecided="hold_contested"`` (and ``"adaptive"`` where it acts as it): what a
        round that falls into parts apart does while no cohort of the history holds more than half of the bank's ids,
        where it is not contested and ``cohort_strong_minority`` does not reject a part. ``"support"`` (the default):
        the support rule decides. ``"keep"``: everyone is kept, as FedAvg would (in the LoRA scenario the support rule
        reads a drifting history, where the one group that agrees across rounds is the attackers'). Measured
        (``docs/results/open-keep``): no round of attackers only under ALIE at 20% where ``"support"`` has three, but
        4.6% behind it under ``minority_flip`` on GPT at 40%, with a round of attackers only: not recommended.
    quorum : float in [0, 1], default=0.0
        Every retain rule: a screened round whose kept clients are fewer than this share of its screened clients is
        held, nobody aggregated (``ScreeningResult.held``). A screen that rejects most of a round contradicts the
        premise that attackers are a minority: either the attackers hold this round (holding it loses only the
        honest few) or the rule erred. In the LoRA matrix 15 of the 20 rounds in which ``FedLNS()`` kept only
        attackers kept fewer than half of the round; but ``quorum=0.5`` failed its measurement under ``weak_core``
        (``docs/results/quorum``: the rounds of attackers only moved to rounds the attackers hold). 0: off.
    sketch_dim : int >= 16, default=2048
        ``"cohort"`` and ``"support"``: length of the update sketch (cosine error about
        ``1/sqrt(sketch_dim)``).
    clip : {"median"} or None, default="median"
        ``"median"`` scales each retained update down to at most the retained clients' median update norm
        in :meth:`ScreeningResult.aggregate` (bounded influence); None, the paper, leaves them.

    Notes
    -----
    Decisions do not depend on the order of clients or of parameter keys: both are put into a canonical
    order (ids: ints then strs, ascending; keys: sorted) before any computation. Medians use numpy's
    convention (mean of the two middle values for an even count).

    :meth:`screen` is transactional and fails closed: every check and every computation that can fail
    runs before the bank or the round counter changes. A client whose input is unusable (see
    ``docs/api.md``: dtype, shape, range, count) or whose standardized signature exceeds
    ``MAX_DEVIATION`` (2**26 robust units, where its squares would swamp everyone else's in float64)
    is rejected as ``"invalid: ..."``, is never banked, and the round is decided exactly as without it.

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

    def __init__(
        self,
        *,
        signature: str = "auto",
        selector: NormSelector | None = None,
        activation_threshold: int = 100,
        mad_floor: float = 1e-6,
        components: str = "bic",
        reg_covar: float = 1e-4,
        n_init: int = 5,
        max_iter: int = 200,
        mixture_solver: str = "fast",
        ema: float = 0.0,
        warmup: str = "aggregate",
        max_count_ratio: float | None = 10.0,
        max_clients: int | None = None,
        random_state: int | None = None,
        retain_rule: str = "cohort",
        lone_separation: float = 3.0,
        min_separation: float = 0.0,
        separation: float = 0.5,
        max_groups: int = 4,
        loud_separation: float = 6.0,
        cohort_decay: float = 0.9,
        cohort_undecided: str = "adaptive",
        cohort_cut: str = "confirmed",
        cohort_vote: str = "settled",
        cohort_weight: str = "agreeing",
        cohort_margin: float = 0.0,
        cohort_balance: float = 0.0,
        cohort_contested: str = "hold",
        cohort_strong_minority: str = "support",
        cohort_open: str = "support",
        quorum: float = 0.0,
        sketch_dim: int = 2048,
        clip: str | None = "median",
    ):
        self.signature = signature
        self.selector = selector
        self.activation_threshold = activation_threshold
        self.mad_floor = mad_floor
        self.components = components
        self.reg_covar = reg_covar
        self.n_init = n_init
        self.max_iter = max_iter
        self.mixture_solver = mixture_solver
        self.ema = ema
        self.warmup = warmup
        self.max_count_ratio = max_count_ratio
        self.max_clients = max_clients
        self.random_state = random_state
        self.retain_rule = retain_rule
        self.lone_separation = lone_separation
        self.min_separation = min_separation
        self.separation = separation
        self.max_groups = max_groups
        self.loud_separation = loud_separation
        self.cohort_decay = cohort_decay
        self.cohort_undecided = cohort_undecided
        self.cohort_cut = cohort_cut
        self.cohort_vote = cohort_vote
        self.cohort_weight = cohort_weight
        self.cohort_margin = cohort_margin
        self.cohort_balance = cohort_balance
        self.cohort_contested = cohort_contested
        self.cohort_strong_minority = cohort_strong_minority
        self.cohort_open = cohort_open
        self.quorum = quorum
        self.sketch_dim = sketch_dim
        self.clip = clip
        self.round_ = 0
        self._bank: HistoryBank | None = None
        self._sketch_seed: int | None = None
        self._cohort = CohortGraph()

    @classmethod
    def paper(cls, **settings) -> FedLNS:
        """The paper's method: Algorithm BICGMMRetain on the normalization signatures, the global model held
        until the bank reaches ``activation_threshold`` (100, the paper's for K=200), no clipping.

        ``settings`` override any of these or set the others (``random_state``, ``selector``, ...).

        Examples
        --------
        >>> screener = FedLNS.paper(random_state=0)
        >>> screener.retain_rule, screener.warmup, screener.clip, screener.activation_threshold
        ('paper', 'hold', None, 100)
        """
        return cls(**{**PAPER_SETTINGS, **settings})

    @classmethod
    def for_federation(
        cls,
        num_clients: int,
        clients_per_round: int,
        malicious_fraction: float = 0.4,
        max_risk: float = 0.01,
        **settings,
    ) -> FedLNS:
        """A screener configured for a federation of ``num_clients`` with ``clients_per_round`` per round.

        The activation threshold comes from :func:`plan_activation` (the smallest bank whose risk of a
        malicious majority stays at most ``max_risk``); every other setting is the default, except that rounds
        of fewer than ``COHORT_MIN_ROUND`` (8) clients get the ``"support"`` rule. Pass
        ``**rule_for_round_size(clients_per_round)`` for the paper-family rule measured best for that round
        size (docs/rules.md). The plan is kept as ``plan_`` (not saved with the screener).

        Parameters
        ----------
        num_clients : int
            Population size K.
        clients_per_round : int
            Clients sampled per round, 1 to K.
        malicious_fraction : float in [0, 0.5), default=0.4
            The assumed *upper bound* on the malicious share of the population, not its true value: the
            default plans for the largest share the defence was measured against.
        max_risk : float in (0, 1), default=0.01
            Accepted probability of a malicious-majority bank at activation.
        **settings
            Any other :class:`FedLNS` setting; an explicit ``activation_threshold`` replaces the planned one.

        Examples
        --------
        >>> screener = FedLNS.for_federation(100, 10, random_state=0)
        >>> screener.activation_threshold, screener.retain_rule, screener.warmup
        (61, 'cohort', 'aggregate')
        >>> FedLNS.for_federation(20, 4, 0.25, **rule_for_round_size(4)).retain_rule
        'peeled'
        """
        from ._plan import plan_activation

        if isinstance(clients_per_round, bool) or not isinstance(clients_per_round, numbers.Integral):
            raise TypeError(f"clients_per_round must be an int, got {clients_per_round!r}")
        if isinstance(num_clients, bool) or not isinstance(num_clients, numbers.Integral):
            raise TypeError(f"num_clients must be an int, got {num_clients!r}")
        if not 1 <= clients_per_round <= num_clients:
            raise ValueError(
                f"clients_per_round must be between 1 and num_clients={num_clients}, got {clients_per_round}"
            )
        plan = plan_activation(num_clients, malicious_fraction, clients_per_round / num_clients, max_risk)
        chosen = dict(activation_threshold=plan.threshold)
        if clients_per_round < COHORT_MIN_ROUND:
            chosen["retain_rule"] = "support"
        chosen.update(settings)
        screener = cls(**chosen)
        screener.validate_params()
        screener.plan_ = plan
        return screener

    @property
    def bank(self) -> HistoryBank:
        """The history bank (created on first use)."""
        if self._bank is None:
            self._bank = HistoryBank(ema=self.ema, max_clients=self.max_clients, random_state=self.random_state)
        return self._bank

    # ------------------------------------------------------------------------------------------- round
    def screen(
        self,
        global_params: ParamDict,
        client_params: Mapping[ClientId, ParamDict],
        num_examples: Mapping[ClientId, float],
    ) -> ScreeningResult:
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
            unsupported id type, invalid settings; and ``ValueError`` when the round cannot be screened
            (the mixture could not be fitted). Nothing has changed then: not the bank, not the round
            counter. Bad *client* input is never raised: the client is rejected with an
            ``"invalid: ..."`` reason and the round goes on.
        """
        settings = self._settings_in_use()
        if not isinstance(client_params, Mapping) or not isinstance(num_examples, Mapping):
            raise TypeError("client_params and num_examples must be mappings keyed by client id")
        global_params = check_global_params(global_params)
        participants = {check_client_id(client_id): None for client_id in client_params}
        participants.update({check_client_id(client_id): None for client_id in num_examples})

        # 1. Each client on its own: input usable (dtype, shape, range, count)? Arrays are read once.
        rejected: dict[ClientId, str] = {}
        arrays: dict[ClientId, dict[str, np.ndarray]] = {}
        counts: dict[ClientId, float | None] = {}  # None beside a rejected client's reason
        problem: str | None
        for client_id in participants:
            if client_id not in client_params:
                problem = "num_examples given but no model"
            elif client_id not in num_examples:
                problem = "no num_examples for this client"
            else:
                counts[client_id], problem = read_count(num_examples[client_id])
                if not problem:
                    problem, arrays[client_id] = client_problem(client_params[client_id], global_params)
            if problem:
                rejected[client_id] = f"invalid: {problem}"
        valid = [client_id for client_id in participants if client_id not in rejected]

        # 2. Signatures (eq. sig_layer, or the LoRA signature), (N, D) float64, in canonical id order; for the
        #    support rule each row goes on with the client's update sketch (N, k), banked beside it, and its
        #    update's norm.
        canonical = sorted(valid, key=id_sort_key)
        signature = self._layout(settings, global_params, [arrays[client_id] for client_id in canonical])
        keys, shapes, width = signature.keys, list(signature.shapes), signature.width
        supporting = settings["retain_rule"] in SKETCHING_RULES
        sketch_dim = settings["sketch_dim"] if supporting else 0
        norms = {}
        with np.errstate(over="ignore", invalid="ignore"):
            signatures = np.empty((len(canonical), width + sketch_dim + 2 * supporting))
            for row, client_id in zip(signatures, canonical):
                signature.write(global_params, arrays[client_id], row[:width])
            if supporting:
                signatures[:, width:-2], client_norms = sketch_updates(
                    global_params,
                    [arrays[client_id] for client_id in canonical],
                    sorted(global_params),
                    sketch_dim,
                    self._sketch_key(),
                )
                signatures[:, -2:] = (self.round_, 0.0)  # round stamp; the score is written once known
                norms = dict(zip(canonical, client_norms.tolist()))
        finite = np.isfinite(signatures).all(axis=1) & np.isfinite([norms.get(c, 0.0) for c in canonical])
        for client_id in (c for c, ok in zip(canonical, finite) if not ok):
            rejected[client_id] = "invalid: signature overflows float64"
        canonical, signatures = [c for c, ok in zip(canonical, finite) if ok], signatures[finite]
        layout = (keys + (SKETCH_KEY, ROUND_KEY), shapes + [(sketch_dim,), (2,)]) if supporting else (keys, shapes)

        # 3. The bank refresh (eq. bank_refresh) staged, not applied; clients beyond MAX_DEVIATION
        #    against the refreshed reference are rejected and the refresh is redone without them, so
        #    the round is decided exactly as if they had not taken part.
        while True:
            refresh = self.bank.stage(canonical, signatures, *layout)
            if not len(refresh):
                features = np.empty_like(signatures[:, :width])
                break
            median, mad = refresh.reference(settings["mad_floor"], width)  # eqs. bank_median-bank_mad
            features = standardize(signatures[:, :width], median, mad)  # (N, D), eq. z_full
            largest = largest_deviations(features)
            beyond = ~(largest <= MAX_DEVIATION)
            if not beyond.any():
                break
            for client_id, value in zip(canonical, largest):
                if not value <= MAX_DEVIATION:
                    rejected[client_id] = (
                        f"invalid: standardized deviation {value:.3g} exceeds 2**26 robust "
                        "units (float64 cannot screen it beside the others)"
                    )
            keep = ~beyond
            canonical, signatures = [c for c, ok in zip(canonical, keep) if ok], signatures[keep]

        scores = (
            deviation_scores(features) if supporting or len(refresh) >= settings["activation_threshold"] else None
        )  # eq. client_score, (N,)
        if supporting:  # each banked entry keeps the score it was screened with: the loud test's reference
            assert scores is not None
            for client_id, score in zip(canonical, scores):
                slot = refresh.slots.get(client_id)
                if slot in refresh.writes:
                    refresh.writes[slot][-1] = np.float32(score)  # in float32, as the sketch
        round_index = self.round_
        screened = set(canonical)
        valid = [client_id for client_id in valid if client_id in screened]
        common: dict[str, Any] = dict(
            round=round_index, bank_size=len(refresh), signature_keys=keys, signature=signature.kind
        )
        warming_up = len(refresh) < settings["activation_threshold"] and settings["warmup"] != "screen"
        change = _CHANGES.get(signature.kind, "normalization change")  # what the reasons name the signature's reading
        cohort = None
        if settings["retain_rule"] == "cohort" and canonical:
            #    The cohort rule learns from every round, warm-up included; it decides only once active.
            assert scores is not None  # computed for every sketching rule
            bank_rows = refresh._block(slice(width, width + sketch_dim + 2)).T  # (B, k + 2): sketches, stamp, score
            cohort = cohort_rule(
                scores,
                signatures[:, width:-2],
                canonical,
                self._cohort,
                bank_rows[:, -2],
                bank_rows[:, -1],
                recent=max(settings["activation_threshold"], 3),
                separation=settings["separation"],
                loud_separation=settings["loud_separation"],
                decay=settings["cohort_decay"],
                undecided=settings["cohort_undecided"],
                cohort_cut=settings["cohort_cut"],
                vote=settings["cohort_vote"],
                weight=settings["cohort_weight"],
                margin=settings["cohort_margin"],
                balance=settings["cohort_balance"],
                contested_round=settings["cohort_contested"],
                strong_minority=settings["cohort_strong_minority"],
                open_round_rule=settings["cohort_open"],
                decide=not warming_up,
                bank_sketches=bank_rows[:, :-2],
                change=change,
            )
        if warming_up:
            retained = tuple(valid) if settings["warmup"] == "aggregate" else ()
            result = ScreeningResult(
                active=False,
                retained=retained,
                rejected=rejected,
                **self._weighting(retained, counts, settings["max_count_ratio"]),
                **self._clipping(retained, arrays, global_params, norms, settings, True),
                **common,
            )
        elif not canonical:
            result = ScreeningResult(active=True, retained=(), rejected=rejected, **common)
        else:
            assert scores is not None  # computed: the bank is full, or supporting (warmup="screen" needs it)
            # 4. Scores (eq. client_score) and the retain rule: the mixture (Algorithm BICGMMRetain) or
            #    one of the rules of docs/rules.md, which also read the bank standardized the same way.
            mixture = dict(
                components=settings["components"],
                reg_covar=settings["reg_covar"],
                n_init=settings["n_init"],
                max_iter=settings["max_iter"],
                solver=settings["mixture_solver"],
                random_state=self._round_seed(round_index),
            )
            support = {}
            try:
                if cohort is not None and not cohort.to_support:
                    labels, n_components, bic = (~cohort.retained).astype(int), None, None
                    reasons = [f"screened: {reason}" if reason else "" for reason in cohort.reasons]
                    support = dict(zip(canonical, cohort.support.tolist()))
                elif supporting:  # the support rule, or the cohort rule's fallback for a round it cannot decide
                    if cohort is None:  # the support rule itself (the cohort rule's fallback has them)
                        bank_rows = refresh._block(slice(width, width + sketch_dim + 2)).T  # (B, k + 2)
                    own = np.array([refresh.slots.get(client_id, -1) for client_id in canonical])
                    outcome = support_rule(
                        scores,
                        signatures[:, width:-2],
                        bank_rows[:, :-2],
                        own,
                        bank_rows[:, -2],
                        bank_rows[:, -1],
                        recent=max(settings["activation_threshold"], 3),
                        max_groups=settings["max_groups"],
                        separation=settings["separation"],
                        loud_separation=settings["loud_separation"],
                        change=change,
                    )
                    labels, n_components, bic = (~outcome.retained).astype(int), None, None
                    reasons = [f"screened: {reason}" if reason else "" for reason in outcome.reasons]
                    support = dict(zip(canonical, outcome.support.tolist()))
                elif settings["retain_rule"] == "paper":
                    decision = bic_gmm_retain(features, scores, **mixture)
                    labels, n_components, bic = decision.labels, decision.n_components, decision.bic
                    reasons = [self._screened_reason(decision) if label else "" for label in labels]
                else:
                    bank_features = standardize(refresh.columns().T, median, mad)  # (B, D)
                    ruled = bank_rule(
                        settings["retain_rule"],
                        features,
                        bank_features,
                        lone_separation=settings["lone_separation"],
                        min_separation=settings["min_separation"],
                        **mixture,
                    )
                    labels, n_components, bic = (~ruled.retained).astype(int), ruled.n_components, ruled.bic
                    reasons = [f"screened: {reason}" if reason else "" for reason in ruled.reasons]
            except (ValueError, FloatingPointError, ArithmeticError, np.linalg.LinAlgError) as error:
                raise ValueError(f"round {round_index} cannot be screened, nothing was changed: {error}") from error
            label_of = dict(zip(canonical, labels.tolist()))
            reason_of = dict(zip(canonical, reasons))
            retained = tuple(client_id for client_id in valid if label_of[client_id] == 0)
            for client_id in valid:
                if label_of[client_id] != 0:
                    rejected[client_id] = reason_of[client_id]
            held = bool(retained) and len(retained) < settings["quorum"] * len(canonical)
            if held:  # the screen kept too few of the round: nobody is aggregated (the labels keep its decision)
                for client_id in retained:
                    rejected[client_id] = (
                        f"held: the screen keeps {len(retained)} of the round's {len(canonical)} screened clients, "
                        f"fewer than the quorum ({settings['quorum']:g} of them), so nobody is aggregated"
                    )
                retained = ()
            flagged = labels != 0
            deviant = dict(
                zip([c for c, flag in zip(canonical, flagged) if flag], _deviant_entries(features[flagged], signature))
            )
            result = ScreeningResult(
                active=True,
                retained=retained,
                rejected=rejected,
                scores={client_id: float(score) for client_id, score in zip(canonical, scores)},
                n_components=n_components,
                bic=bic or None,
                labels={client_id: label_of[client_id] for client_id in valid},
                support=support,
                deviant_entries=deviant,
                held=held,
                **self._weighting(retained, counts, settings["max_count_ratio"]),
                **self._clipping(retained, arrays, global_params, norms, settings),
                **common,
            )

        # 5. Commit: nothing above changed any state.
        self.bank.commit(refresh)
        if cohort is not None:
            self._cohort = cohort.graph.restricted(self.bank._by_slot)
        if supporting and self._sketch_seed is None:
            self._sketch_seed = self._sketch_key()
        self.round_ = round_index + 1
        return result

    @staticmethod
    def _weighting(retained, counts, max_count_ratio) -> dict[str, Any]:
        """Weights alpha (eq. weight) of the retained clients, counts capped at ratio x their median."""
        if not retained:
            return {}
        given = {client_id: counts[client_id] for client_id in retained}
        used = dict(given)
        if max_count_ratio is not None:
            cap = max_count_ratio * float(np.median(list(given.values())))
            used = {client_id: min(count, cap) for client_id, count in given.items()}
        return {
            "weights": normalized_weights(used),
            "num_examples": used,
            "capped_counts": {c: given[c] for c in retained if used[c] != given[c]},
        }

    @staticmethod
    def _clipping(retained, arrays, global_params, norms, settings, warming_up=False) -> dict[str, Any]:
        """Clipping factors of the retained updates (``clip="median"``), norms computed where not known. While
        everyone is averaged (warm-up) the limit is the lower quartile: a round's majority of attackers then
        cannot set it, unless they are three quarters of the round."""
        if settings["clip"] is None or not retained:
            return {}
        for client_id in retained:
            if client_id not in norms:
                norms[client_id] = float(
                    np.sqrt(
                        sum(
                            float(np.square(np.subtract(arrays[client_id][key], value, dtype=np.float64)).sum())
                            for key, value in global_params.items()
                        )
                    )
                )
        return {"clip_scales": clip_scales(norms, retained, WARMUP_CLIP_QUANTILE if warming_up else 0.5)}

    def update_sketches(self, global_params: ParamDict, client_params: Mapping[ClientId, ParamDict]) -> dict:
        """The sketches of the clients' full updates that the ``"cohort"`` and ``"support"`` rules bank (their
        secret signs), by id.

        For offline analysis of recorded rounds: called after a round was screened, it gives exactly the sketches
        that round banked. Before the first screened round the signs' seed is not fixed yet unless
        ``random_state`` is set.
        """
        ids = list(client_params)
        sketches, _ = sketch_updates(
            global_params, [client_params[i] for i in ids], sorted(global_params), self.sketch_dim, self._sketch_key()
        )
        return dict(zip(ids, sketches))

    def client_signatures(
        self, global_params: ParamDict, client_params: Mapping[ClientId, ParamDict]
    ) -> tuple[tuple[str, ...], dict]:
        """``(entries, {id: (D,) float64 signature})``: each client's signature as :meth:`screen` reads it now (the
        layout the bank holds, else the one this payload gives), without screening anything.

        For offline analysis of recorded rounds, beside :meth:`update_sketches`.
        """
        layout = self._layout(self._settings_in_use(), global_params, list(client_params.values()))
        rows = {}
        for client_id, params in client_params.items():
            rows[client_id] = np.empty(layout.width)
            layout.write(global_params, params, rows[client_id])
        return layout.keys, rows

    def _layout(self, settings: dict, global_params: ParamDict, clients: list) -> SignatureLayout:
        """The signature layout of a round: the bank's, else the one ``clients``' payloads give."""
        selector = settings["selector"] if settings["selector"] is not None else NormSelector()
        banked = [key for key in self.bank.keys if key not in (SKETCH_KEY, ROUND_KEY)]
        return signature_layout(settings["signature"], global_params, selector, clients, banked)

    def _sketch_key(self) -> int:
        """The secret seed of the update sketch's signs: from ``random_state``, else drawn once and saved."""
        if self._sketch_seed is not None:
            return self._sketch_seed
        if self.random_state is not None:
            return int(np.random.SeedSequence([self.random_state, 0x5EED]).generate_state(1)[0])
        if getattr(self, "_fresh_sketch_seed", None) is None:
            self._fresh_sketch_seed = int(np.random.SeedSequence().generate_state(1)[0])
        return self._fresh_sketch_seed

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

    def validate_params(self) -> dict[str, Any]:
        """Check the settings (one table: ``PARAMETER_CONSTRAINTS``) and return them as plain values.

        ``ValueError`` names the first bad setting. numpy scalars count as their Python types.
        """
        settings = validate_settings("FedLNS", {name: getattr(self, name) for name in PARAMETER_CONSTRAINTS})
        if settings["retain_rule"] in SKETCHING_RULES and settings["ema"]:
            raise ValueError(
                f"retain_rule={settings['retain_rule']!r} banks each client's latest update as it "
                f"is (ema=0), got ema={settings['ema']}"
            )
        if settings["warmup"] == "screen" and settings["retain_rule"] not in SKETCHING_RULES:
            raise ValueError(
                f"warmup='screen' needs retain_rule='cohort' or 'support' (the others need a full "
                f"bank), got retain_rule={settings['retain_rule']!r}"
            )
        if settings["max_clients"] is not None and settings["max_clients"] < settings["activation_threshold"]:
            raise ValueError(
                f"max_clients={settings['max_clients']} is below activation_threshold="
                f"{settings['activation_threshold']}: screening could never start"
            )
        return settings

    def _settings_in_use(self) -> dict[str, Any]:
        """:meth:`validate_params`, and the bank set to the settings it shares (changed since its creation only
        by assigning the screener's attributes)."""
        settings = self.validate_params()
        bank = self.bank
        bank.ema, bank.max_clients, bank.random_state = (
            settings["ema"],
            settings["max_clients"],
            settings["random_state"],
        )
        return settings

    # ------------------------------------------------------------------------------------- persistence
    def get_params(self) -> dict[str, Any]:
        """The constructor settings (the selector as a plain dict)."""
        params = {name: getattr(self, name) for name in PARAMETER_CONSTRAINTS}
        params["selector"] = None if self.selector is None else self.selector.to_config()
        return params

    def save(self, path) -> None:
        """Write settings, history bank and round counter to ``path`` (``.npz``; atomic; no pickle)."""
        settings = self._settings_in_use()
        settings["selector"] = None if settings["selector"] is None else settings["selector"].to_config()
        bank_header, arrays = self.bank._state()
        header = {"params": settings, "round": self.round_, "bank": bank_header, "sketch_seed": self._sketch_seed}
        if len(self._cohort):  # the cohort graph over the bank's ids, in the bank's column order
            header["cohort"] = True
            arrays["cohort_weights"] = self._cohort.restricted(bank_header["ids"]).weights
        write_state(path, "screener", header, arrays)

    @classmethod
    def load(cls, path) -> FedLNS:
        """Read a screener written by :meth:`save`; ``ValueError`` (only) for a corrupt or foreign file.

        Settings are checked against the same table as the constructor's; the round must be an int >= 0.
        A file written before ``max_count_ratio`` existed gets its default; one written before
        ``mixture_solver``, ``clip``, ``retain_rule``, ``warmup`` or ``signature`` existed keeps what it was
        written with (``"sklearn"``, no clipping, the paper's rule, warm-up and signature), not today's defaults.
        """
        header, arrays = read_state(path, "screener", _expected_arrays)
        try:
            params = header["params"]
            if not isinstance(params, dict):
                raise ValueError("params is not an object")
            params = dict(params)
            params.setdefault("mixture_solver", "sklearn")
            params.setdefault("clip", None)  # written before clipping existed
            params.setdefault("retain_rule", "paper")  # before the setting existed the paper's rule was the only one
            params.setdefault("warmup", "hold")  # and the paper's warm-up the only one
            params.setdefault("signature", "norm")  # and the norms the only signature
            params.setdefault("cohort_undecided", "keep")  # and an undecided cohort round kept whole
            params.setdefault("cohort_cut", "tree")  # and every cut the tree found counted
            params.setdefault("cohort_vote", "round")  # and the votes read the graph with the round's edges
            params.setdefault("cohort_weight", "unit")  # and every split round's edges weighed 1
            params.setdefault("quorum", 0.0)  # and every screened round aggregated whatever it kept
            params.setdefault("cohort_margin", 0.0)  # and a part rejected on any negative vote
            params.setdefault("cohort_balance", 0.0)  # and the graph's split read however balanced
            params.setdefault("cohort_contested", "hold")  # and a contested round held
            params.setdefault("cohort_strong_minority", "support")  # and an open round left to the support rule,
            params.setdefault("cohort_open", "support")  # its strong minority part or not
            if params.get("selector") is not None:
                params["selector"] = _selector_from_config(params["selector"])
            params = validate_settings("screener state", params)
            screener = cls(**params)
            screener.validate_params()
            round_index = header["round"]
            if not isinstance(round_index, int) or isinstance(round_index, bool) or round_index < 0:
                raise ValueError(f"round must be an int >= 0, got {escape_text(repr(round_index), 40)}")
            screener.round_ = round_index
            sketch_seed = header.get("sketch_seed")
            if sketch_seed is not None and (
                isinstance(sketch_seed, bool) or not isinstance(sketch_seed, int) or not 0 <= sketch_seed < 2**32
            ):
                raise ValueError(
                    f"sketch_seed must be an int in [0, 2**32) or null, got {escape_text(repr(sketch_seed), 40)}"
                )
            screener._sketch_seed = sketch_seed
            bank = HistoryBank._from_state(header["bank"], arrays, path)
            if (bank.ema, bank.max_clients, bank.random_state) != (
                screener.ema,
                screener.max_clients,
                screener.random_state,
            ):
                raise ValueError("the bank's settings differ from the screener's")
        except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as error:
            raise ValueError(f"{path}: invalid screener state ({error})") from error
        screener._bank = bank
        if header.get("cohort"):
            weights = arrays["cohort_weights"]
            if not (np.isfinite(weights).all() and np.array_equal(weights, weights.T)):
                raise ValueError(f"{path}: invalid screener state (cohort weights not finite and symmetric)")
            screener._cohort = CohortGraph(bank._by_slot, np.array(weights, dtype=np.float64))
        return screener

    def __repr__(self) -> str:
        changed = {name: value for name, value in self.get_params().items() if value != _DEFAULTS.get(name)}
        return f"FedLNS({', '.join(f'{name}={value!r}' for name, value in changed.items())})"


def _expected_arrays(header) -> dict:
    """The arrays a screener state's header announces: the bank's, and the cohort graph's where it has one."""
    bank = header.get("bank") if isinstance(header, dict) else None
    expected = HistoryBank._expected_arrays(bank)
    if isinstance(header, dict) and header.get("cohort") and isinstance(bank, dict):  # the bank's check passed
        size = len(bank["ids"])
        expected["cohort_weights"] = ((size, size), np.dtype(np.float64))
    return expected


def _plain(value):
    """A JSON-safe number: numpy scalars as Python ones, non-finite floats as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _deviant_entries(features: np.ndarray, signature) -> list[str]:
    """For each row of standardized ``features`` (eq. ``z_full``), the signature entry of largest mean ``|z|``."""
    if not features.shape[0]:
        return []
    sizes = np.array(signature.sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    means = np.add.reduceat(np.abs(features), starts, axis=1) / np.maximum(sizes, 1)
    means[:, sizes == 0] = -np.inf  # reduceat reads an empty entry's neighbour
    return [signature.keys[index] for index in np.argmax(means, axis=1)]


def _shown(client_id) -> str:
    return escape_text(str(client_id), 80)


def _selector_from_config(config) -> NormSelector:
    """A NormSelector from :meth:`NormSelector.to_config` output, checked field by field (files written before
    ``match`` was named so hold it as ``rule``)."""
    if isinstance(config, dict) and set(config) == {"rule", "patterns", "keys"}:
        config = {"match": config["rule"], "patterns": config["patterns"], "keys": config["keys"]}
    if not isinstance(config, dict) or set(config) != {"match", "patterns", "keys"}:
        raise ValueError("selector must be an object with match, patterns and keys")
    for name in ("patterns", "keys"):
        value = config[name]
        if value is not None and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            raise ValueError(f"selector {name} must be a list of str or null")
    validate_settings("selector", {"match": config["match"]}, SELECTOR_CONSTRAINTS)
    return NormSelector(**config)


_DEFAULTS = FedLNS().get_params()


#: How a reason names what a signature reads where that is not the paper's normalization change.
_CHANGES = {"lora": "LoRA change", "lora+norm": "LoRA and normalization change"}
