"""Baseline aggregation rules of the paper's experiments (``tab:app_baselines``).

One module per rule (``_fedavg``, ``_norm_bounded_fedavg``, ``_coordinate_median``,
``_trimmed_mean``, ``_multi_krum``, ``_flame``), each over the one stacked-update view of
``_stack``; ``_registry`` names them. Every rule works on client *updates* (deltas ``w_i - w_t``)
given as named arrays and, its parameters bound, the core's ``fedlns_core.Aggregator`` signature
``(updates, num_examples) -> update``, returning an ``AggregationResult``. The result reads as the aggregated
update (a mapping of named arrays) and also says which clients the rule kept (Multi-Krum's
selection, FLAME's cluster) for detection rates, so each one composes with FedLNS::

    new_global = screening_result.aggregate(global_params, client_params, aggregator=coordinate_median)

and the simulator's server step is::

    result = make_aggregator(name, **params)(client_updates(global_params, client_params), num_examples)
    new_global = fedlns_core.apply_update(global_params, result)

``make_aggregator(name, **params)`` binds a rule's parameters by name (:data:`AGGREGATOR_NAMES`);
:func:`paper_parameters` gives the paper's (``tab:app_robust_agg_params``).
"""

from ._coordinate_median import coordinate_median
from ._fedavg import fedavg
from ._flame import flame
from ._multi_krum import multi_krum
from ._norm_bounded_fedavg import norm_bounded_fedavg
from ._registry import AGGREGATOR_NAMES, Aggregator, make_aggregator, paper_parameters
from ._stack import AggregationResult, ClientDeltas, client_updates
from ._trimmed_mean import trimmed_count, trimmed_mean

__all__ = [
    "AGGREGATOR_NAMES",
    "AggregationResult",
    "Aggregator",
    "ClientDeltas",
    "client_updates",
    "coordinate_median",
    "fedavg",
    "flame",
    "make_aggregator",
    "multi_krum",
    "norm_bounded_fedavg",
    "paper_parameters",
    "trimmed_count",
    "trimmed_mean",
]
