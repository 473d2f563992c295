"""Which modules are normalization layers, and the error for a model whose norm layers do not train.

Shared by the norm-parameter selection (``_norms``) and the PEFT payload (``_peft``).
"""

from __future__ import annotations

from torch import nn

# Norm classes torch itself ships. Architecture-specific classes (LlamaRMSNorm,
# T5LayerNorm, GemmaRMSNorm, ...) subclass nn.Module directly, so they are found by
# class name instead (see _is_norm_module).
_TORCH_NORM_TYPES: tuple[type, ...] = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.modules.batchnorm._NormBase,  # BatchNorm*, InstanceNorm*, SyncBatchNorm
)
if hasattr(nn, "RMSNorm"):  # torch >= 2.4
    _TORCH_NORM_TYPES += (nn.RMSNorm,)

_NORM_NAME_SUFFIXES = ("Norm", "RMSNorm", "LayerNorm", "LayerNormalization")


class FrozenNormError(ValueError):
    """The model has normalization layers, but none of their parameters train.

    FedLNS reads the change of normalization parameters between the global and the
    local model; frozen norms (the default in LoRA fine-tuning) never change, so the
    signature would be empty.
    """


def _is_norm_module(module: nn.Module) -> bool:
    """True for torch norm layers and for any class in the MRO named like a norm layer."""
    if isinstance(module, _TORCH_NORM_TYPES):
        return True
    return any(cls.__name__.endswith(_NORM_NAME_SUFFIXES) for cls in type(module).__mro__)
