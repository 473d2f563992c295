"""fedlns-core: screen federated client models by their normalization-layer parameter changes.

The framework-agnostic core of FedLNS works on dicts of named numpy arrays. It never imports torch,
Flower, FedML or transformers; the adapters in ``fedlns_torch``, ``fedlns_flower`` and ``fedlns_fedml``
translate those frameworks' objects.
"""

from ._aggregate import AggregationRule as AggregationRule  # deprecated name: importable, not in __all__
from ._aggregate import Aggregator, apply_update, weighted_average
from ._bank import HistoryBank
from ._journal import ScreeningJournal
from ._lora import lora_payload_keys
from ._mixture import MixtureDecision, bic_gmm_retain
from ._plan import ActivationPlan, plan_activation
from ._robust import deviation_scores, median_mad, standardize
from ._screening import FedLNS, ScreeningResult, rule_for_round_size
from ._settings import PARAMETER_CONSTRAINTS
from ._signature import NormSelector, extract_signature
from ._types import ClientId, ParamDict, escape_text

__version__ = "0.1.0"

__all__ = [
    "ActivationPlan",
    "Aggregator",
    "ClientId",
    "FedLNS",
    "HistoryBank",
    "MixtureDecision",
    "NormSelector",
    "PARAMETER_CONSTRAINTS",
    "ParamDict",
    "ScreeningJournal",
    "ScreeningResult",
    "apply_update",
    "bic_gmm_retain",
    "deviation_scores",
    "escape_text",
    "extract_signature",
    "lora_payload_keys",
    "median_mad",
    "plan_activation",
    "rule_for_round_size",
    "standardize",
    "weighted_average",
]
