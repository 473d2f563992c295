"""FedLNS in front of a FedML server aggregator: screen in ``on_before_aggregation``, aggregate the rest."""

from __future__ import annotations

import json
import logging
import numbers
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from fedml.core import Context
from fedml.ml.aggregator.default_aggregator import DefaultServerAggregator

from fedlns_core import ClientId, FedLNS, ScreeningJournal, ScreeningResult, escape_text
from fedlns_fedml._convert import EntryError, snapshot, to_numpy, to_state_dict

logger = logging.getLogger("fedlns_fedml")


@dataclass(frozen=True)
class RoundRecord:
    """One screened round as the adapter saw it.

    Attributes
    ----------
    client_ids : tuple of client ids
        Identity of each entry of the list FedML passed in, by list position.
    kept_positions : tuple of int
        Positions (in that list) of the retained entries, as returned to FedML.
    screening : fedlns_core.ScreeningResult or None
        The core's decision for the entries that could be read; None when the round could not be
        screened (then nothing is kept and ``error`` says why).
    unreadable : dict of client id to str
        Entries the adapter could not even convert (never shown to the core), with reasons.
    error : str or None
        Why the round could not be screened, if it could not.
    round : int
        The screener's round index.
    """

    client_ids: tuple[ClientId, ...]
    kept_positions: tuple[int, ...]
    screening: ScreeningResult | None
    unreadable: dict[ClientId, str]
    error: str | None = None
    round: int = 0

    @property
    def rejected(self) -> dict[ClientId, str]:
        """Every rejected client with its reason: unreadable ones and the core's rejections."""
        return {**self.unreadable, **(self.screening.rejected if self.screening else {})}

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON form (one line of the decision log); per-client maps as ``[id, value]`` pairs."""
        return {
            "client_ids": list(self.client_ids),
            "kept_positions": list(self.kept_positions),
            "unreadable": [[client_id, reason] for client_id, reason in self.unreadable.items()],
            "screening": None if self.screening is None else self.screening.to_dict(),
            "error": self.error,
        }


@dataclass
class _Pending:
    """What ``on_before_aggregation`` decided, waiting for ``aggregate`` of the same round."""

    record: RoundRecord
    global_arrays: dict[str, np.ndarray]
    client_arrays: dict[ClientId, dict[str, np.ndarray]]
    handed_out: tuple[int, ...]  # id() of each state dict returned to FedML, to recognise the list


class FedLNSAggregatorMixin:
    """Put FedLNS screening in front of any FedML ``ServerAggregator``.

    Mix it in *before* the aggregator class, e.g.
    ``class Screened(FedLNSAggregatorMixin, MyServerAggregator)``, or use
    :class:`FedLNSServerAggregator`. It overrides three methods and passes everything
    else (testing, contribution assessment, ``on_after_aggregation``) through:

    - ``set_model_params`` also keeps a detached copy of the weights it installs: that
      copy is the global model ``w_t`` broadcast next round, against which signatures
      are taken. The copy made at construction is ``w_0``; each ``aggregate`` result
      replaces it too (FedML's cross-device server broadcasts that result without
      calling ``set_model_params``).
    - ``on_before_aggregation(list)`` first runs the wrapped aggregator's own hook
      (FedML's DP clipping, attack simulation and built-in defenses), then reads each
      ``(sample_num, state_dict)`` entry, screens the readable ones with
      ``screener.screen`` (Algorithm ServerFedLNS) and returns the retained entries and
      their positions in the original list, as FedML expects.
    - ``aggregate(list)`` aggregates the retained entries with the core
      (``w_t + sum_i alpha_i (w_i - w_t)``, Eq. (FedLNS_aggregation): sample-weighted,
      or ``aggregator``) and returns a new state dict in the model's dtypes. While the bank
      warms up (``warmup="hold"``) or when nothing is retained it returns ``w_t``
      unchanged (Eq. (FedLNS_skip_update)). Called without a preceding
      ``on_before_aggregation`` (FedML's cross-device server does that), it screens the
      list itself first; after one, it must get the list that hook returned.

    Parameters
    ----------
    model, args
        Passed to the wrapped aggregator's constructor.
    screener : fedlns_core.FedLNS
        The screener. If ``state_path`` holds saved state, that state replaces it.
    aggregator : callable, optional
        Aggregator over the retained clients' updates, as accepted by
        :meth:`fedlns_core.ScreeningResult.aggregate` (``aggregator(updates, num_examples)``
        returning one update). Default: the sample-weighted average. ``rule=`` is its
        deprecated name.
    state_path : str or os.PathLike, optional
        Save the screener there after every round (atomic, no pickle) and resume from it.
    log_path : str or os.PathLike, optional
        JSON-lines file; one line per round with :meth:`RoundRecord.to_dict`.
    **kwargs
        Passed to the wrapped aggregator's constructor.

    Attributes
    ----------
    records : list of RoundRecord
        Every screened round, oldest first.

    Notes
    -----
    **Client identity.** FedML hands the aggregator a plain list; positions are mapped to
    client ids in this order of preference:

    1. ids given for the coming round by :meth:`set_round_client_ids` (the
       single-process simulation patch, :func:`attach_to_sp_fedavg`, passes each
       ``Client.client_idx``, the data-silo index of the client that trained);
    2. ``args.client_id_list`` when it has one id per entry: FedML's cross-silo and
       cross-device servers store the upload of edge ``sender_id`` at position
       ``client_real_ids.index(sender_id)`` with ``client_real_ids =
       json.loads(args.client_id_list)``, so position ``i`` is
       ``client_real_ids[i]``;
    3. ``Context().get(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND)`` when it has one id per
       entry (the cross-silo server sets it to the round's selected edge ids).

    If none fits, the round fails with a ``RuntimeError``: positions are never used as ids,
    since they would put different clients under one bank entry.

    **Bad entries.** An entry that is not a ``(sample_num, state_dict)`` pair, or whose
    values are not real tensors/arrays (or fail to convert in any way), is rejected by the
    adapter with an ``"invalid: ..."`` reason; NaN/inf or out-of-range values, missing or
    extra keys, wrong shapes, extreme deviations and unusable sample counts are rejected
    by the core (see ``docs/api.md``). Rejected entries never enter the bank or the
    aggregate, and the round goes on. A round that cannot be screened at all keeps the
    global model (nothing retained, the error logged and recorded); the screener is then
    unchanged.

    Not supported: FedML's homomorphic encryption (``enable_fhe``), whose encrypted
    models cannot be screened, and aggregators that return per-client model dicts.
    """

    # Provided by the FedML ServerAggregator this mixin is combined with (fedml has no type information).
    args: Any
    get_model_params: Callable[[], Any]
    on_after_aggregation: Callable[[Any], Any]

    def __init__(
        self,
        model,
        args,
        *,
        screener: FedLNS,
        aggregator: Callable | None = None,
        rule: Callable | None = None,
        state_path: str | os.PathLike | None = None,
        log_path: str | os.PathLike | None = None,
        **kwargs,
    ) -> None:
        super().__init__(model, args, **kwargs)  # type: ignore[call-arg]  # FedML's ServerAggregator
        if not isinstance(screener, FedLNS):
            raise TypeError(f"screener must be a fedlns_core.FedLNS, got {type(screener).__name__}")
        screener.validate_params()
        if rule is not None:
            warnings.warn(
                f"{type(self).__name__}(rule=...) is now aggregator=...; rule= will be removed",
                FutureWarning,
                stacklevel=2,
            )
            aggregator = aggregator if aggregator is not None else rule
        if aggregator is not None and not callable(aggregator):
            raise TypeError(f"aggregator must be callable or None, got {type(aggregator).__name__}")
        if getattr(args, "enable_fhe", False):
            raise ValueError("FedLNS cannot screen homomorphically encrypted models (args.enable_fhe)")
        self.journal = ScreeningJournal(state_path=state_path, log_path=log_path)
        resumed = self.journal.resume(screener)
        if resumed is not screener:
            logger.info("FedLNS: resumed screener from %s (round %d)", state_path, resumed.round_)
        self.screener = resumed
        _warn_if_too_few_clients(resumed, getattr(args, "client_num_in_total", None))
        self.aggregator = aggregator
        self.state_path = state_path
        self.log_path = log_path
        self.records: list[RoundRecord] = []
        self._global_state = snapshot(self.get_model_params())
        self._next_client_ids: tuple | None = None
        self._pending: _Pending | None = None

    # ------------------------------------------------------------------ global model

    def set_model_params(self, model_parameters) -> None:
        """Install the weights (wrapped aggregator) and keep a copy as the broadcast ``w_t``."""
        super().set_model_params(model_parameters)  # type: ignore[misc]  # FedML's ServerAggregator
        self._global_state = snapshot(self.get_model_params())

    @property
    def global_state(self) -> OrderedDict:
        """A copy of the global weights ``w_t`` that screening compares clients against."""
        return snapshot(self._global_state)

    def set_round_client_ids(self, client_ids: Sequence[ClientId]) -> None:
        """Name the clients of the next list, by position (used once, by the next screening)."""
        self._next_client_ids = tuple(client_ids)

    # ------------------------------------------------------------------ FedML hooks

    def on_before_aggregation(self, raw_client_model_or_grad_list):
        """Screen the ``(sample_num, state_dict)`` list; return ``(retained_entries, kept_positions)``."""
        entries = list(raw_client_model_or_grad_list)
        client_ids = self._round_client_ids(len(entries))
        upstream, positions = super().on_before_aggregation(entries)  # type: ignore[misc]  # FedML's
        positions = [int(position) for position in positions]
        if len(upstream) != len(positions):
            raise RuntimeError(
                f"wrapped on_before_aggregation returned {len(upstream)} entries but {len(positions)} indices"
            )
        pending = self._screen(list(upstream), [client_ids[p] for p in positions], client_ids, positions)
        kept = [upstream[positions.index(p)] for p in pending.record.kept_positions]
        pending.handed_out = tuple(id(entry[1]) for entry in kept)
        self._pending = pending
        return kept, list(pending.record.kept_positions)

    def aggregate(self, raw_client_model_or_grad_list):
        """Aggregate the retained entries (screening them first if ``on_before_aggregation`` did not)."""
        entries = list(raw_client_model_or_grad_list)
        pending, self._pending = self._pending, None
        if pending is None:
            client_ids = self._round_client_ids(len(entries))
            pending = self._screen(entries, list(client_ids), client_ids, list(range(len(entries))))
        elif tuple(id(_second(entry)) for entry in entries) != pending.handed_out:
            # Screening again would count the round twice in the bank; refuse instead.
            raise RuntimeError(
                "aggregate() got a different list from the one on_before_aggregation() returned "
                f"for round {pending.record.round}; pass the returned list unchanged"
            )
        result = pending.record.screening
        if result is None:  # the round could not be screened: keep w_t
            return snapshot(self._global_state)
        new_global = to_state_dict(
            result.aggregate(pending.global_arrays, pending.client_arrays, aggregator=self.aggregator),
            self._global_state,
        )
        # The result is the next broadcast w_{t+1}. The cross-device server sends it without
        # calling set_model_params; where set_model_params follows (cross-silo, sp), it
        # replaces this copy with what was finally installed (e.g. after central DP noise).
        self._global_state = snapshot(new_global)
        return new_global

    # ------------------------------------------------------------------ internals

    def _round_client_ids(self, count: int) -> tuple:
        """Client id of each list position (see the class notes for the order of sources)."""
        explicit, self._next_client_ids = self._next_client_ids, None
        candidates = [
            ("set_round_client_ids", explicit),
            ("args.client_id_list", _parse_id_list(getattr(self.args, "client_id_list", None))),
            (
                "Context client_id_list_in_this_round",
                _parse_id_list(Context().get(Context.KEY_CLIENT_ID_LIST_IN_THIS_ROUND)),
            ),
        ]
        for source, ids in candidates:
            if ids is not None and len(ids) == count:
                return tuple(_plain_id(client_id) for client_id in ids)
            if ids is not None and source == "set_round_client_ids":
                raise ValueError(f"set_round_client_ids gave {len(ids)} ids for a list of {count} entries")
        raise RuntimeError(
            f"FedLNS cannot name the {count} clients of this round: neither set_round_client_ids, "
            "args.client_id_list nor FedML's Context has one id per entry"
        )

    def _screen(self, entries, entry_ids, all_ids, positions) -> _Pending:
        """Read the entries, screen the readable ones, log and remember the decision."""
        if len(set(all_ids)) != len(all_ids):
            raise RuntimeError(f"FedLNS: the round's client ids are not unique: {list(all_ids)}")
        global_arrays = to_numpy(self._global_state)
        client_arrays: dict[ClientId, dict[str, np.ndarray]] = {}
        counts: dict[ClientId, Any] = {}
        unreadable: dict[ClientId, str] = {}
        position_of: dict[ClientId, int] = {}
        for client_id, position, entry in zip(entry_ids, positions, entries):
            position_of[client_id] = position
            try:
                sample_num, state_dict = _read_entry(entry)
                client_arrays[client_id] = to_numpy(state_dict)
                counts[client_id] = sample_num
            except EntryError as error:
                unreadable[client_id] = f"invalid: {error}"
            except Exception as error:  # noqa: BLE001 - one entry never stops the round
                unreadable[client_id] = (
                    f"invalid: entry cannot be converted ({type(error).__name__}: {escape_text(str(error), 200)})"
                )
        round_index = self.screener.round_
        try:
            result, failure_text = self.screener.screen(global_arrays, client_arrays, counts), None
        except ValueError as failure:  # screen() changed nothing: hold this round
            result, failure_text = None, str(failure)
        kept = () if result is None else tuple(position_of[c] for c in result.retained)
        record = RoundRecord(
            client_ids=tuple(all_ids),
            kept_positions=kept,
            screening=result,
            unreadable=unreadable,
            error=failure_text,
            round=round_index,
        )
        self._record(record)
        return _Pending(record, global_arrays, client_arrays, handed_out=())

    def _record(self, record: RoundRecord) -> None:
        """Keep, log, persist (state and JSON line, via the shared journal) one round's decision."""
        self.records.append(record)
        for client_id, reason in record.unreadable.items():
            logger.warning(
                "FedLNS round %d: client %s unreadable: %s", record.round, escape_text(str(client_id), 80), reason
            )
        if record.screening is None:
            logger.error(
                "FedLNS round %d could not be screened; global model kept: %s",
                record.round,
                escape_text(record.error or "", 400),
            )
        else:
            logger.info("FedLNS %s", record.screening.explain())
        self.journal.record(self.screener if record.screening is not None else None, record.to_dict())


class FedLNSServerAggregator(FedLNSAggregatorMixin, DefaultServerAggregator):  # type: ignore[misc]  # fedml is untyped
    """FedML's ``DefaultServerAggregator`` (torch model, classification test) with FedLNS screening.

    See :class:`FedLNSAggregatorMixin` for the parameters and behaviour. Pass it as
    ``server_aggregator`` to ``fedml.FedMLRunner`` (cross-silo, cross-device), or attach
    it to the single-process simulation with :func:`attach_to_sp_fedavg`.

    Examples
    --------
    >>> import types, collections, torch
    >>> from fedlns_core import FedLNS
    >>> model = torch.nn.Sequential(collections.OrderedDict(
    ...     fc=torch.nn.Linear(3, 4), ln=torch.nn.LayerNorm(4)))
    >>> args = types.SimpleNamespace(client_id_list="[11, 12, 13]")
    >>> aggregator = FedLNSServerAggregator(
    ...     model, args, screener=FedLNS(activation_threshold=10, random_state=0))
    >>> uploads = [(50, model.state_dict()) for _ in range(3)]
    >>> kept, positions = aggregator.on_before_aggregation(uploads)
    >>> len(kept), positions                  # the bank (3 of 10 clients) is warming up: everyone averaged
    (3, [0, 1, 2])
    >>> torch.equal(aggregator.aggregate(kept)["fc.weight"], model.state_dict()["fc.weight"])
    True
    >>> aggregator.records[-1].client_ids
    (11, 12, 13)
    """


def _read_entry(entry) -> tuple[Any, Any]:
    """Split one list entry into ``(sample_num, state_dict)``; EntryError if it is no such pair.

    The count is passed on as it came: the core judges it (number, finite, positive).
    """
    if not isinstance(entry, (tuple, list)) or len(entry) != 2:
        raise EntryError(f"entry is a {type(entry).__name__}, expected a (sample_num, state_dict) pair")
    return entry[0], entry[1]


def _second(entry):
    """The state dict of an entry, or the entry itself when it is not a pair."""
    return entry[1] if isinstance(entry, (tuple, list)) and len(entry) == 2 else entry


def _parse_id_list(value) -> list | None:
    """FedML keeps id lists as JSON strings (``args.client_id_list``) or lists; None if neither."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    try:
        return list(value)
    except TypeError:
        return None


def _plain_id(client_id) -> ClientId:
    """Numpy integers (from FedML's np.random.choice sampling) become ints; str stays str."""
    if isinstance(client_id, (numbers.Integral, np.integer)) and not isinstance(client_id, bool):
        return int(client_id)
    return client_id


def _warn_if_too_few_clients(screener: FedLNS, total: Any) -> None:
    """Warn when a federation of ``total`` clients (``args.client_num_in_total``) cannot activate screening."""
    threshold = screener.activation_threshold
    if (
        isinstance(total, numbers.Integral)
        and not isinstance(total, bool)
        and total < threshold
        and len(screener.bank) < threshold
    ):
        logger.warning(
            "FedLNS will not screen: activation_threshold=%d, but args.client_num_in_total=%d; every entry is %s. "
            "FedLNS.for_federation(num_clients, clients_per_round) plans the threshold for a federation",
            threshold,
            total,
            "aggregated unscreened" if screener.warmup == "aggregate" else "held (the global model unchanged)",
        )
