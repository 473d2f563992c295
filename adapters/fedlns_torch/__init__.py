"""PyTorch adapter for FedLNS: named numpy dicts from models, and norm-parameter selection.

It only translates: state dicts to and from the ``Mapping[str, numpy.ndarray]`` that
:mod:`fedlns_core` works on, and a model's normalization modules to a
:class:`fedlns_core.NormSelector`.
"""

from fedlns_torch._convert import (
    load_numpy_into_model,
    numpy_to_state_dict,
    state_dict_to_numpy,
    tensor_to_numpy,
    tied_keys,
)
from fedlns_torch._norms import FrozenNormError, norm_parameter_names, norm_selector

__all__ = [
    "FrozenNormError",
    "load_numpy_into_model",
    "norm_parameter_names",
    "norm_selector",
    "numpy_to_state_dict",
    "state_dict_to_numpy",
    "tensor_to_numpy",
    "tied_keys",
]
