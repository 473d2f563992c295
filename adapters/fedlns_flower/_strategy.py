"""FedLNSStrategy: FedLNS screening as a wrapper around any Flower Message-API strategy."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedlns_core import FedLNS, ScreeningResult
from fedlns_flower._records import ReplyError, read_train_reply, reply_layout

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
    example count is the inner strategy's ``weighted_by_key`` metric. Error replies
    and replies that cannot be read are dropped with a logged reason; invalid arrays
    (missing keys, wrong shapes, NaN) are rejected by the screener with a reason. While
    the bank warms up with ``warmup="hold"``, the current arrays are returned
    unchanged (Eq. (FedLNS_skip_update)).

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
        self.strategy = strategy
        self.screener = screener
        self.state_path = state_path
        self.log_path = log_path
        self.results: list[dict] = []
        self._state_checked = False
        self._current_arrays: ArrayRecord | None = None
        self._current_round: int | None = None

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
        """Remember the arrays sent this round (the paper's w_t), then pass through."""
        self._resume_state()
        self._current_arrays = arrays
        self._current_round = server_round
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Pass through to the inner strategy."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
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
            ``fedlns-retained``, ``fedlns-rejected`` (screened out or invalid),
            ``fedlns-dropped`` (error or unreadable replies) and ``fedlns-components``
            (-1 while inactive).
        """
        if self._current_arrays is None or self._current_round != server_round:
            raise RuntimeError(
                f"aggregate_train for round {server_round} without configure_train for that "
                "round: FedLNSStrategy needs the arrays sent to clients (w_t)"
            )
        global_arrays = _arrays_of(self._current_arrays)
        replies = list(replies)
        readable, dropped = self._read_replies(replies)

        if not readable:
            log(WARNING, "FedLNS round %d: no readable replies; arrays unchanged", server_round)
            self._record(server_round, None, dropped)
            return self._current_arrays, self._metrics(None, dropped, MetricRecord())

        client_arrays = {node: arrays for node, (_, arrays, _) in readable.items()}
        num_examples = {node: count for node, (_, _, count) in readable.items()}
        result = self.screener.screen(global_arrays, client_arrays, num_examples)
        self._record(server_round, result, dropped)
        if self.state_path is not None:
            self.screener.save(self.state_path)
        for node, reason in result.rejected.items():
            log(INFO, "FedLNS round %d: rejected node %s: %s", server_round, node, reason)

        retained = [readable[node][0] for node in result.retained]
        if not retained:
            # Warm-up hold (w_{t+1} = w_t) or nothing retained: keep the current arrays.
            log(
                INFO,
                "FedLNS round %d: %s (bank %d); arrays unchanged",
                server_round,
                "active, nothing retained" if result.active else "warming up",
                result.bank_size,
            )
            return self._current_arrays, self._metrics(result, dropped, MetricRecord())

        log(
            INFO,
            "FedLNS round %d: retained %d of %d replies (components=%s, bank %d)",
            server_round,
            len(retained),
            len(replies),
            result.n_components,
            result.bank_size,
        )
        arrays, metrics = self.strategy.aggregate_train(server_round, retained)
        return arrays, self._metrics(result, dropped, metrics or MetricRecord())

    # ------------------------------------------------------------------ helpers

    def _read_replies(self, replies: list[Message]):
        """Split replies into readable ``{node: (msg, arrays, count)}`` and dropped ``{node: reason}``."""
        readable: dict[int, tuple[Message, dict[str, np.ndarray], float]] = {}
        dropped: dict[int, str] = {}
        layouts: dict[int, tuple] = {}
        for message in replies:
            node = int(message.metadata.src_node_id)
            if node in readable or node in dropped:
                # A second reply from one node in one round would count it twice.
                readable.pop(node, None)
                dropped[node] = "dropped: more than one reply from this node in the round"
                continue
            if message.has_error():
                dropped[node] = f"dropped: error reply (code {message.error.code}): {message.error.reason}"
                continue
            try:
                arrays, count = read_train_reply(message, self.weighted_by_key)
            except ReplyError as error:
                dropped[node] = f"dropped: {error}"
                continue
            readable[node] = (message, arrays, count)
            layouts[node] = reply_layout(message)

        # Flower's aggregators stop the whole round if retained replies differ in record
        # names or metric keys; keep the most common layout and drop the others.
        if readable:
            common, _ = Counter(layouts[node] for node in readable).most_common(1)[0]
            for node in [node for node in readable if layouts[node] != common]:
                del readable[node]
                dropped[node] = (
                    "dropped: record names or metric keys differ from the other replies "
                    f"(got {layouts[node]}, expected {common})"
                )
        for node, reason in dropped.items():
            log(WARNING, "FedLNS: node %s %s", node, reason)
        return readable, dropped

    def _resume_state(self) -> None:
        """Load the saved screener once, at the first round, if ``state_path`` exists."""
        if self._state_checked:
            return
        self._state_checked = True
        if self.state_path is not None and Path(self.state_path).exists():
            self.screener = FedLNS.load(self.state_path)
            log(
                INFO,
                "FedLNS: resumed state from %s (%d rounds screened, bank of %d clients)",
                self.state_path,
                self.screener.round_,
                len(self.screener.bank),
            )

    def _record(self, server_round: int, result: ScreeningResult | None, dropped: dict) -> None:
        """Keep the round's decision and append it to the JSON-lines log."""
        self.results.append({"server_round": server_round, "screening": result, "dropped": dict(dropped)})
        if self.log_path is None:
            return
        line = {
            "server_round": server_round,
            "screening": None if result is None else result.to_dict(),
            "dropped": {str(node): reason for node, reason in dropped.items()},
        }
        with open(self.log_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")

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
        metrics["fedlns-components"] = -1 if result.n_components is None else int(result.n_components)
        return metrics


def _arrays_of(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The global arrays as numpy; a record that cannot be read is a server-side bug."""
    return {key: array.numpy() for key, array in record.items()}
