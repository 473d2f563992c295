"""PyTorch adapter for FedLNS: named numpy dicts from models, and norm-parameter selection.

It only translates: state dicts (and PEFT payloads) to and from the
``Mapping[str, numpy.ndarray]`` that :mod:`fedlns_core` works on, and a model's
normalization modules to a :class:`fedlns_core.NormSelector`; for PEFT it also adds the
norm modules to what is trained and sent (:func:`make_norms_trainable`). ``peft`` is
imported only when a PEFT function is called.
"""

from fedlns_torch._convert import (
    load_numpy_into_model,
    numpy_to_state_dict,
    state_dict_to_numpy,
    tensor_to_numpy,
    tied_keys,
)
from fedlns_torch._norm_layers import FrozenNormError
from fedlns_torch._norms import norm_parameter_names, norm_selector
from fedlns_torch._peft import (
    is_peft_model,
    load_numpy_into_peft_model,
    lora_parameter_names,
    make_norms_trainable,
    peft_state_dict_to_numpy,
)

__all__ = [
    "FrozenNormError",
    "is_peft_model",
    "load_numpy_into_model",
    "load_numpy_into_peft_model",
    "lora_parameter_names",
    "make_norms_trainable",
    "norm_parameter_names",
    "norm_selector",
    "numpy_to_state_dict",
    "peft_state_dict_to_numpy",
    "state_dict_to_numpy",
    "tensor_to_numpy",
    "tied_keys",
]
