"""Translate Flower records to and from the named numpy dicts of fedlns_core."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from numbers import Real

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from fedlns_core import escape_text


class ReplyError(ValueError):
    """A reply that cannot be read as (named arrays, example count); the text is the reason."""


def arrayrecord_to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    """Deserialize an ``ArrayRecord`` into ``{key: ndarray}``, keeping its keys as names.

    Parameters
    ----------
    record : flwr.app.ArrayRecord
        Arrays serialized by Flower (``stype`` numpy).

    Returns
    -------
    dict[str, numpy.ndarray]
        New arrays (deserialization copies), in record order.

    Examples
    --------
    >>> import numpy as np
    >>> from flwr.app import Array, ArrayRecord
    >>> arrays = arrayrecord_to_numpy(ArrayRecord({"ln.weight": Array(np.ones(2))}))
    >>> arrays["ln.weight"].tolist()
    [1.0, 1.0]
    """
    arrays: dict[str, np.ndarray] = {}
    for key, array in record.items():
        try:
            arrays[key] = array.numpy()
        except Exception as error:  # any failure to deserialize is the reply's fault (re-raised as ReplyError)
            raise ReplyError(
                f"array {escape_text(repr(key), 80)} cannot be read as numpy "
                f"({type(error).__name__}: {escape_text(str(error), 120)})"
            ) from error
    return arrays


def numpy_to_arrayrecord(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Serialize ``{key: ndarray}`` into an ``ArrayRecord`` with the same keys.

    Examples
    --------
    >>> import numpy as np
    >>> list(numpy_to_arrayrecord({"a": np.zeros(3)}).keys())
    ['a']
    """
    return ArrayRecord({key: Array(np.asarray(value)) for key, value in arrays.items()})


def read_train_reply(message: Message, weighted_by_key: str) -> tuple[dict[str, np.ndarray], float]:
    """Read a training reply's arrays and example count, or raise :class:`ReplyError`.

    Parameters
    ----------
    message : flwr.app.Message
        A reply without error. It must hold exactly one ``ArrayRecord`` and exactly
        one ``MetricRecord`` (as Flower's built-in strategies require).
    weighted_by_key : str
        Metric that holds the example count :math:`n_{t,i}` (e.g. ``"num-examples"``).

    Returns
    -------
    arrays : dict[str, numpy.ndarray]
        Named by the ``ArrayRecord`` keys.
    num_examples : int or float
        The count metric as sent; its validity (finite, positive, bounded) is checked by the core.
    """
    content = message.content
    if len(content.array_records) != 1:
        raise ReplyError(f"expected exactly one ArrayRecord, got {len(content.array_records)}")
    if len(content.metric_records) != 1:
        raise ReplyError(f"expected exactly one MetricRecord, got {len(content.metric_records)}")
    metrics = next(iter(content.metric_records.values()))
    if weighted_by_key not in metrics:
        raise ReplyError(f"MetricRecord lacks the example-count metric {escape_text(repr(weighted_by_key))}")
    count = metrics[weighted_by_key]
    if isinstance(count, bool) or not isinstance(count, Real):
        raise ReplyError(f"metric {weighted_by_key!r} must be a single number, got {type(count).__name__}")
    arrays = arrayrecord_to_numpy(next(iter(content.array_records.values())))
    return arrays, count


def canonical_reply(message: Message, arrays_record: ArrayRecord, metric_keys, count) -> Message:
    """A copy of a retained reply in the layout every retained reply shares.

    One ``ArrayRecord`` named ``"arrays"`` (the reply's own, unchanged) and one ``MetricRecord`` named
    ``"metrics"`` holding only ``metric_keys`` (the metrics every retained reply has, of one kind) with
    the example count as the screener weighted it. Flower's aggregators stop a round whose replies
    differ in record names or metric keys; this way no reply's layout can get another one dropped.
    The sender's metadata is kept.
    """
    metrics = next(iter(message.content.metric_records.values()))
    kept = {key: metrics[key] for key in metric_keys}
    kept[count[0]] = count[1]
    content = RecordDict({"arrays": arrays_record, "metrics": MetricRecord(kept)})
    return Message(content=content, metadata=copy.copy(message.metadata))  # type: ignore[call-overload]  # accepted, not in flwr's overloads


def shared_metric_keys(messages: list[Message], weighted_by_key: str) -> tuple[str, ...]:
    """Metric keys that every message has, all single numbers or all lists of one length."""
    records = [next(iter(message.content.metric_records.values())) for message in messages]
    shared = set(records[0].keys()) if records else set()
    for record in records[1:]:
        shared &= set(record.keys())
    kept = []
    for key in sorted(shared - {weighted_by_key}):
        values = [record[key] for record in records]
        if all(isinstance(value, Real) and not isinstance(value, bool) for value in values):
            kept.append(key)
        elif all(isinstance(value, list) for value in values) and len({len(value) for value in values}) == 1:  # type: ignore[arg-type]  # all lists
            kept.append(key)
    return tuple(kept)
