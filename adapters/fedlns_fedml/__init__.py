"""FedML adapter for FedLNS (FedML 0.9.6).

:class:`FedLNSServerAggregator` (or :class:`FedLNSAggregatorMixin` on your own
``ServerAggregator``) screens the ``(sample_num, state_dict)`` list that FedML's servers
pass to ``on_before_aggregation`` and aggregates only the retained models;
:func:`attach_to_sp_fedavg` routes FedML's single-process simulation through it. See
``docs/fedml.md`` for the separate environment FedML needs.
"""

from fedlns_fedml._aggregator import FedLNSAggregatorMixin, FedLNSServerAggregator, RoundRecord
from fedlns_fedml._sp import attach_to_sp_fedavg

__all__ = [
    "FedLNSAggregatorMixin",
    "FedLNSServerAggregator",
    "RoundRecord",
    "attach_to_sp_fedavg",
]
