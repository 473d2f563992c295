"""Run FedML's single-process simulation (``backend: sp``) through a FedLNS aggregator."""

from __future__ import annotations

from fedml.simulation.sp.fedavg.fedavg_api import FedAvgAPI

from fedlns_fedml._aggregator import FedLNSAggregatorMixin


def attach_to_sp_fedavg(simulation, aggregator: FedLNSAggregatorMixin) -> FedAvgAPI:
    """Make FedML's single-process FedAvg aggregate through ``aggregator``.

    FedML 0.9.6's ``SimulatorSingleProcess`` ignores the ``server_aggregator`` it is
    given: its ``FedAvgAPI.train`` loop calls its own ``FedAvgAPI._aggregate(w_locals)``
    (a plain sample-weighted average). This function replaces that one method *on the
    given instance only* (no class or module is patched) by::

        ids = [client.client_idx for client in api.client_list]   # who made w_locals[i]
        aggregator.set_round_client_ids(ids)
        kept, positions = aggregator.on_before_aggregation(w_locals)
        new_global = aggregator.on_after_aggregation(aggregator.aggregate(kept))
        aggregator.set_model_params(new_global)
        return new_global

    which is the sequence FedML's cross-silo server runs. ``train`` then loads the
    returned weights into the shared model as usual.

    Parameters
    ----------
    simulation : fedml.FedMLRunner, SimulatorSingleProcess or FedAvgAPI
        A single-process simulation built with ``federated_optimizer: FedAvg``, not yet run.
    aggregator : FedLNSAggregatorMixin
        The screening aggregator. Its global copy is reset here to the simulation's
        current (initial) weights, the ``w_0`` every client receives in round 0.

    Returns
    -------
    FedAvgAPI
        The patched simulation object; the original method stays reachable as
        ``FedAvgAPI._aggregate(api, w_locals)``.

    Notes
    -----
    Client identity: in round ``t`` the ``k``-th entry of ``w_locals`` is trained by
    ``api.client_list[k]`` on the data of silo ``client_idx`` (its index in
    ``train_data_local_dict``), set by ``Client.update_local_dataset`` from FedML's
    client sampling just before training. That silo index is the stable id.

    In sp all clients train the *same* model object in turn, so the model's weights at
    aggregation time are the last client's, not ``w_t``: the aggregator compares against
    its own copy of the weights it installed, never against the live model.
    """
    api = _fedavg_api(simulation)
    if getattr(api, "_fedlns_aggregator", None) is not None:
        raise RuntimeError("this simulation already aggregates through a FedLNS aggregator")
    if not isinstance(aggregator, FedLNSAggregatorMixin):
        raise TypeError(f"aggregator must use FedLNSAggregatorMixin, got {type(aggregator).__name__}")
    aggregator.set_model_params(api.model_trainer.get_model_params())

    def _aggregate(w_locals):
        aggregator.set_round_client_ids([client.client_idx for client in api.client_list])
        kept, _positions = aggregator.on_before_aggregation(w_locals)
        new_global = aggregator.on_after_aggregation(aggregator.aggregate(kept))
        aggregator.set_model_params(new_global)
        return new_global

    api._aggregate = _aggregate
    api._fedlns_aggregator = aggregator
    return api


def _fedavg_api(simulation) -> FedAvgAPI:
    """Find the FedAvgAPI inside a FedMLRunner or SimulatorSingleProcess."""
    candidate = simulation
    for attribute in ("runner", "fl_trainer"):
        if not isinstance(candidate, FedAvgAPI) and hasattr(candidate, attribute):
            candidate = getattr(candidate, attribute)
    if not isinstance(candidate, FedAvgAPI):
        raise TypeError(
            f"expected a single-process FedAvg simulation (FedMLRunner with backend 'sp' and "
            f"federated_optimizer 'FedAvg'), got {type(candidate).__name__}"
        )
    return candidate
