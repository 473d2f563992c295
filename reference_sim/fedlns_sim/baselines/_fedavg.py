"""FedAvg (McMahan et al. 2017): the sample-weighted mean of the updates."""

from __future__ import annotations

from collections.abc import Mapping

from ._stack import AggregationResult, ClientId, Stack, Updates


def fedavg(updates: Updates, num_examples: Mapping[ClientId, float], *, check_finite: bool = True) -> AggregationResult:
    """Sample-weighted mean of client updates (FedAvg, McMahan et al. 2017).

    Parameters
    ----------
    updates : mapping of ClientId to mapping of str to ndarray
        Each client's update ``w_i - w_t``; all clients have the same keys and shapes.
    num_examples : mapping of ClientId to float
        Example count ``n_i`` of every client in ``updates`` (finite, > 0); extra ids are ignored.
    check_finite : bool, default True
        Raise ``ValueError`` naming the client and key if an update holds NaN or inf.

    Returns
    -------
    AggregationResult
        ``sum_i n_i u_i / sum_i n_i`` (read it as a mapping, keys in the first client's order,
        floating dtype of the inputs); every client kept, ``details["weights"]`` the normalised
        weights.

    Examples
    --------
    >>> import numpy as np
    >>> updates = {"a": {"w": np.array([1.0, 0.0])}, "b": {"w": np.array([4.0, 3.0])}}
    >>> fedavg(updates, {"a": 2, "b": 1})["w"]
    array([2., 1.])
    """
    stack = Stack(updates, num_examples, check_finite)
    assert stack.counts is not None  # num_examples is required here
    weights = stack.counts / stack.counts.sum()
    return stack.result(stack.combine(weights), details={"weights": stack.by_client(weights)})
