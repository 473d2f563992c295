"""Translate Flower records to and from the named numpy dicts of fedlns_core."""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real

import numpy as np
from flwr.app import Array, ArrayRecord, Message


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
        except (TypeError, ValueError) as error:
            raise ReplyError(f"array {key!r} cannot be read as numpy ({error})") from error
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
    num_examples : float
        The count metric; its validity (finite, positive) is checked by the core.
    """
    content = message.content
    if len(content.array_records) != 1:
        raise ReplyError(
            f"expected exactly one ArrayRecord, got {len(content.array_records)}"
        )
    if len(content.metric_records) != 1:
        raise ReplyError(
            f"expected exactly one MetricRecord, got {len(content.metric_records)}"
        )
    metrics = next(iter(content.metric_records.values()))
    if weighted_by_key not in metrics:
        raise ReplyError(f"MetricRecord lacks the example-count metric {weighted_by_key!r}")
    count = metrics[weighted_by_key]
    if isinstance(count, bool) or not isinstance(count, Real):
        raise ReplyError(
            f"metric {weighted_by_key!r} must be a single number, got {type(count).__name__}"
        )
    arrays = arrayrecord_to_numpy(next(iter(content.array_records.values())))
    return arrays, float(count)


def reply_layout(message: Message) -> tuple:
    """Record names and metric keys of a reply: replies handed on together must agree."""
    content = message.content
    metric_keys = tuple(
        sorted(key for record in content.metric_records.values() for key in record)
    )
    return (
        tuple(content.array_records.keys()),
        tuple(content.metric_records.keys()),
        metric_keys,
    )
