"""FedLNSStrategy: FedLNS screening as a wrapper around any Flower Message-API strategy."""

from __future__ import annotations

import os
from collections.abc import Iterable
from logging import ERROR, INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedlns_core import FedLNS, ScreeningJournal, ScreeningResult, escape_text
from fedlns_flower._records import (
    ReplyError,
    canonical_reply,
    read_train_reply,
    shared_metric_keys,
)

_DEFAULT_WEIGHTED_BY_KEY = "num-examples"


class FedLNSStrategy(Strategy):
    """Screen client updates with FedLNS before another strategy aggregates them.

    The wrapper passes sampling, configuration, evaluation and summaries through to
    ``strategy`` and steps in only in :meth:`aggregate_train`: it reads each reply's
    arrays and example count, lets ``screener`` decide which clients to retain
    (Algorithm ServerFedLNS of the paper), and hands only the retained replies to
    ``strategy.aggregate_train``, so FedAvg's sample weighting (the paper's Eq.
    (FedLNS_aggregation)), FedMedian or any other rule applies to what survives.

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy
        The Message-API strategy to wrap (``FedAvg``, ``FedMedian``, ...).
    screener : fedlns_core.FedLNS
        The screener. If ``state_path`` holds saved state, that state (history bank,
        round counter and the saved settings) replaces this screener at the first
        round.
    state_path : str or os.PathLike, optional
        Where to save the screener after every screened round (atomically, via
        ``FedLNS.save``) and to resume from when a ServerApp restarts.
    log_path : str or os.PathLike, optional
        A JSON-lines file; one line per training round is appended with the
        ``ScreeningResult`` and the replies the adapter itself dropped.

    Attributes
    ----------
    results : list[dict]
        Per training round: ``{"server_round", "screening" (ScreeningResult or None),
        "dropped" ({node_id: reason})}``.

    Notes
    -----
    Client identity is ``msg.metadata.src_node_id``, set by the SuperLink, never
    anything the client writes. Parameter names are the ``ArrayRecord`` keys, the
    example count is the inner strategy's ``weighted_by_key`` metric. Replies from
    nodes that were not sent a train message this round, error replies, replies that
    cannot be read and replies whose arrays differ in dtype from the global model's are
    dropped with a logged reason; invalid arrays (missing or extra keys, wrong shapes,
    NaN, out-of-range values) and counts are rejected by the screener with a reason.

    Screening comes first; only then are the retained replies brought to one layout
    (one ``ArrayRecord`` ``"arrays"``, one ``MetricRecord`` ``"metrics"`` with the
    metrics all of them share and the count as the screener weighted it), so extra
    metric keys are ignored and can never get another reply dropped. No reply stops
    the ServerApp: if a round fails as a whole (it cannot be screened, or the inner
    strategy raises), the current arrays are kept and the failure is logged. While the
    bank warms up with ``warmup="hold"``, the current arrays are returned unchanged
    (Eq. (FedLNS_skip_update)).

    Examples
    --------
    >>> from flwr.serverapp.strategy import FedAvg
    >>> from fedlns_core import FedLNS
    >>> strategy = FedLNSStrategy(strategy=FedAvg(), screener=FedLNS(activation_threshold=20))
    >>> strategy.weighted_by_key
    'num-examples'
    """

    def __init__(
        self,
        *,
        strategy: Strategy,
        screener: FedLNS,
        state_path: str | os.PathLike | None = None,
        log_path: str | os.PathLike | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(strategy, Strategy):
            raise TypeError(f"strategy must be a flwr Strategy, got {type(strategy).__name__}")
        if not isinstance(screener, FedLNS):
            raise TypeError(f"screener must be a fedlns_core.FedLNS, got {type(screener).__name__}")
        screener.validate_params()
        self.strategy = strategy
        self.screener = screener
        self.journal = ScreeningJournal(state_path=state_path, log_path=log_path)
        self.state_path = state_path
        self.log_path = log_path
        self.results: list[dict] = []
        self._started = False  # the first configure_train resumes the saved state and checks the grid's size
        self._current_arrays: ArrayRecord | None = None
        self._current_round: int | None = None
        self._sent_to: set[int] = set()

    @property
    def weighted_by_key(self) -> str:
        """The inner strategy's example-count metric (``"num-examples"`` if it has none)."""
        return getattr(self.strategy, "weighted_by_key", _DEFAULT_WEIGHTED_BY_KEY)

    def __repr__(self) -> str:
        return f"FedLNSStrategy(strategy={self.strategy!r}, screener={self.screener!r})"

    # ------------------------------------------------------------------ pass-through

    def summary(self) -> None:
        """Log this wrapper's settings, then the inner strategy's summary."""
        log(INFO, "\t├──> FedLNS screening of %s", type(self.strategy).__name__)
        log(INFO, "\t│\t├── Screener: %r", self.screener)
        log(INFO, "\t│\t├── State path: %s", self.state_path)
        log(INFO, "\t│\t└── Log path: %s", self.log_path)
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the arrays sent this round (the paper's w_t) and to whom, then pass through."""
        if not self._started:
            self._started = True
            self._resume_state()
            self._warn_if_too_few_nodes(grid)
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._current_arrays = arrays
        self._current_round = server_round
        self._sent_to = {int(message.metadata.dst_node_id) for message in messages}
        return messages

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Pass through to the inner strategy."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Pass through to the inner strategy."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    # ------------------------------------------------------------------ screening

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen the replies with FedLNS and aggregate the retained ones with the inner strategy.

        Parameters
        ----------
        server_round : int
            The current round; :meth:`configure_train` must have run for it.
        replies : Iterable[flwr.app.Message]
            Training replies.

        Returns
        -------
        arrays : flwr.app.ArrayRecord or None
            The inner strategy's aggregate of the retained replies; the current arrays
            unchanged while warming up or when nothing is retained.
        metrics : flwr.app.MetricRecord
            The inner strategy's metrics plus ``fedlns-active``, ``fedlns-bank-size``,
            ``fedlns-retained``, ``fedlns-rejected`` (screened out, held or invalid), ``fedlns-held``
            (1 where ``quorum`` held the round), ``fedlns-dropped`` (error or unreadable replies) and
            ``fedlns-components`` (-1 while inactive); only ``fedlns-failed`` = 1 (and the current arrays)
            when the round failed as a whole.
        """
        if self._current_arrays is None or self._current_round != server_round:
            raise RuntimeError(
                f"aggregate_train for round {server_round} without configure_train for that "
                "round: FedLNSStrategy needs the arrays sent to clients (w_t)"
            )
        try:
            return self._screen_and_aggregate(server_round, list(replies))
        except Exception as error:  # noqa: BLE001 - no round may stop the ServerApp
            log(
                ERROR,
                "FedLNS round %d failed (%s: %s); arrays unchanged",
                server_round,
                type(error).__name__,
                escape_text(str(error), 400),
            )
            return self._current_arrays, MetricRecord({"fedlns-failed": 1})

    def _screen_and_aggregate(self, server_round: int, replies: list[Message]):
        assert self._current_arrays is not None  # set by configure_train before any reply
        global_arrays = _arrays_of(self._current_arrays)
        readable, dropped = self._read_replies(replies, global_arrays)

        if not readable:
            log(WARNING, "FedLNS round %d: no readable replies; arrays unchanged", server_round)
            self._record(server_round, None, dropped)
            return self._current_arrays, self._metrics(None, dropped, MetricRecord())

        client_arrays = {node: arrays for node, (_, arrays, _) in readable.items()}
        num_examples = {node: count for node, (_, _, count) in readable.items()}
        try:
            result = self.screener.screen(global_arrays, client_arrays, num_examples)
        except ValueError as error:
            # screen() changed nothing; hold this round rather than aggregate unscreened replies.
            log(ERROR, "FedLNS round %d: %s; arrays unchanged", server_round, escape_text(str(error), 400))
            self._record(server_round, None, dropped, error=str(error))
            return self._current_arrays, self._metrics(None, dropped, MetricRecord({"fedlns-failed": 1}))
        self._record(server_round, result, dropped)
        for node, reason in result.rejected.items():
            log(INFO, "FedLNS round %d: rejected node %s: %s", server_round, node, escape_text(reason, 400))

        if not result.retained:
            # Warm-up hold (w_{t+1} = w_t), a round the quorum held, or nothing retained: keep the current arrays.
            state = "active, nothing retained"
            if not result.active:
                state = "warming up"
            elif result.held:
                state = "held by the quorum"
            log(INFO, "FedLNS round %d: %s (bank %d); arrays unchanged", server_round, state, result.bank_size)
            return self._current_arrays, self._metrics(result, dropped, MetricRecord())

        if not result.active:
            log(
                INFO,
                "FedLNS round %d: warming up (bank %d of activation_threshold=%d): %d of %d replies aggregated "
                "unscreened",
                server_round,
                result.bank_size,
                self.screener.activation_threshold,
                len(result.retained),
                len(replies),
            )
        else:
            log(
                INFO,
                "FedLNS round %d: retained %d of %d replies (components=%s, bank %d)",
                server_round,
                len(result.retained),
                len(replies),
                result.n_components,
                result.bank_size,
            )
        retained = self._canonical_replies(result, readable)
        arrays, metrics = self.strategy.aggregate_train(server_round, retained)
        return arrays, self._metrics(result, dropped, metrics or MetricRecord())

    # ------------------------------------------------------------------ helpers

    def _read_replies(self, replies: list[Message], global_arrays: dict[str, np.ndarray]):
        """Split replies into readable ``{node: (msg, arrays, count)}`` and dropped ``{node: reason}``."""
        readable: dict[int, tuple[Message, dict[str, np.ndarray], float]] = {}
        dropped: dict[int, str] = {}
        for message in replies:
            node = int(message.metadata.src_node_id)
            if node in readable or node in dropped:
                # A second reply from one node in one round would count it twice.
                readable.pop(node, None)
                dropped[node] = "dropped: more than one reply from this node in the round"
                continue
            try:
                readable[node] = self._read_reply(node, message, global_arrays)
            except ReplyError as error:
                dropped[node] = f"dropped: {error}"
            except Exception as error:  # noqa: BLE001 - a reply must never stop the round
                dropped[node] = f"dropped: unreadable reply ({type(error).__name__}: {escape_text(str(error), 200)})"
        for node, reason in dropped.items():
            log(WARNING, "FedLNS: node %s %s", node, reason)
        return readable, dropped

    def _read_reply(self, node: int, message: Message, global_arrays: dict[str, np.ndarray]):
        if node not in self._sent_to:
            raise ReplyError("this node was not sent a train message this round")
        if message.has_error():
            raise ReplyError(
                f"error reply (code {escape_text(str(message.error.code), 20)}): "
                f"{escape_text(str(message.error.reason), 200)}"
            )
        arrays, count = read_train_reply(message, self.weighted_by_key)
        for key, value in arrays.items():
            # Flower's FedAvg averages in the replies' dtype: the first reply's would become the model's.
            if key in global_arrays and value.dtype != global_arrays[key].dtype:
                raise ReplyError(
                    f"array {escape_text(repr(key), 80)} has dtype {value.dtype}, "
                    f"the global model's is {global_arrays[key].dtype}"
                )
        return message, arrays, count

    def _canonical_replies(self, result: ScreeningResult, readable: dict) -> list[Message]:
        """The retained replies in one shared layout, each with the count the screener weighted."""
        messages = [readable[node][0] for node in result.retained]
        metric_keys = shared_metric_keys(messages, self.weighted_by_key)
        out = []
        for node, message in zip(result.retained, messages):
            given = readable[node][2]
            count = given if node not in result.capped_counts else result.num_examples[node]
            arrays_record = next(iter(message.content.array_records.values()))
            out.append(canonical_reply(message, arrays_record, metric_keys, (self.weighted_by_key, count)))
        return out

    def _warn_if_too_few_nodes(self, grid: Grid) -> None:
        """Warn when the bank and the grid's nodes together cannot activate screening (at the first round)."""
        threshold = self.screener.activation_threshold
        if len(self.screener.bank) >= threshold:
            return
        try:
            known = set(self.screener.bank.ids) | {int(node) for node in grid.get_node_ids()}
        except Exception:  # noqa: BLE001 - a warning must never stop the ServerApp
            return
        if len(known) < threshold:
            log(
                WARNING,
                "FedLNS will not screen yet: activation_threshold=%d, but the grid's nodes and the bank know %d "
                "clients; until that many distinct clients have replied every reply is %s. "
                "FedLNS.for_federation(num_clients, clients_per_round) plans the threshold for a federation",
                threshold,
                len(known),
                "aggregated unscreened" if self.screener.warmup == "aggregate" else "held (arrays unchanged)",
            )

    def _resume_state(self) -> None:
        """Load the saved screener (at the first round) if ``state_path`` exists."""
        resumed = self.journal.resume(self.screener)
        if resumed is not self.screener:
            self.screener = resumed
            log(
                INFO,
                "FedLNS: resumed state from %s (%d rounds screened, bank of %d clients)",
                self.state_path,
                self.screener.round_,
                len(self.screener.bank),
            )

    def _record(
        self, server_round: int, result: ScreeningResult | None, dropped: dict, error: str | None = None
    ) -> None:
        """Keep the round's decision; save the screener and append the JSON line (shared journal)."""
        self.results.append(
            {"server_round": server_round, "screening": result, "dropped": dict(dropped), "error": error}
        )
        line = {
            "server_round": server_round,
            "screening": None if result is None else result.to_dict(),
            "dropped": [[node, reason] for node, reason in dropped.items()],
            "error": error,
        }
        self.journal.record(self.screener if result is not None else None, line)

    @staticmethod
    def _metrics(result: ScreeningResult | None, dropped: dict, metrics: MetricRecord) -> MetricRecord:
        """Add the round's FedLNS decision to ``metrics`` (MetricRecord holds numbers only)."""
        metrics["fedlns-dropped"] = len(dropped)
        if result is None:
            return metrics
        metrics["fedlns-active"] = int(result.active)
        metrics["fedlns-bank-size"] = int(result.bank_size)
        metrics["fedlns-retained"] = len(result.retained)
        metrics["fedlns-rejected"] = len(result.rejected)
        metrics["fedlns-held"] = int(result.held)
        metrics["fedlns-components"] = -1 if result.n_components is None else int(result.n_components)
        return metrics


def _arrays_of(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The global arrays as numpy; a record that cannot be read is a server-side bug."""
    return {key: array.numpy() for key, array in record.items()}
