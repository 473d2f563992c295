"""Find the trainable normalization-layer parameters of a PyTorch model by module type."""

from __future__ import annotations

from torch import nn

from fedlns_torch import _peft
from fedlns_torch._norm_layers import FrozenNormError, _is_norm_module


def _norm_parameters(model: nn.Module):
    """Yield (name, parameter) for the direct parameters of every norm module, in model order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        if not _is_norm_module(module):
            continue
        # Direct parameters only: a wrapper that is itself called "...Norm" and holds
        # a child norm must not report the child's parameters twice.
        for parameter_name, parameter in module.named_parameters(recurse=False):
            if id(parameter) in seen:
                continue  # a shared (tied) norm parameter counts once
            seen.add(id(parameter))
            name = f"{module_name}.{parameter_name}" if module_name else parameter_name
            yield name, parameter


def norm_parameter_names(model: nn.Module, *, trainable_only: bool = True) -> tuple[str, ...]:
    """Names of the normalization-layer parameters of ``model``, found by module type.

    A module counts as a normalization layer when it is a torch norm layer
    (``nn.LayerNorm``, ``nn.RMSNorm``, ``nn.GroupNorm``, batch/instance norms) or when
    its class, or a base class, has a name ending in ``Norm``, ``RMSNorm`` or
    ``LayerNorm`` (``LlamaRMSNorm``, ``Qwen2RMSNorm``, ``MistralRMSNorm``,
    ``T5LayerNorm``, ``GemmaRMSNorm``, ...). Only the module's own parameters are
    taken, never buffers such as running statistics. These are the layers
    :math:`\\ell \\in \\mathcal{L}` of the paper's signature, Eq. (FedLNS_sig_layer).

    For a ``peft.PeftModel`` the names are keys of what the client sends,
    ``get_peft_model_state_dict(model)`` (active adapter), and only the norm parameters
    that this payload carries count: the ``modules_to_save`` or LN-tuning copies, named
    as in the payload (``...input_layernorm.weight``), never the frozen originals.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose state-dict keys (or PEFT payload keys) the names must match.
    trainable_only : bool, default True
        Keep only parameters with ``requires_grad=True``.

    Returns
    -------
    tuple[str, ...]
        State-dict keys (payload keys for a PEFT model), in model order. May be empty.

    Examples
    --------
    >>> from torch import nn
    >>> block = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    >>> norm_parameter_names(block)
    ('1.weight', '1.bias')
    """
    names = tuple(name for name, parameter in _norm_parameters(model) if parameter.requires_grad or not trainable_only)
    if _peft.is_peft_model(model):
        payload_keys = _peft.payload_keys_of(model, names)
        return tuple(payload_keys[name] for name in names if name in payload_keys)
    return names


def norm_selector(model: nn.Module):
    """A :class:`fedlns_core.NormSelector` over the trainable norm parameters of ``model``.

    Parameters
    ----------
    model : torch.nn.Module
        The model trained by the clients, as it will be trained (after freezing, PEFT
        wrapping, etc.), so that ``requires_grad`` reflects what changes.

    Returns
    -------
    fedlns_core.NormSelector
        ``NormSelector(keys=norm_parameter_names(model))``.

    Raises
    ------
    FrozenNormError
        The model has normalization parameters but none is trainable (e.g. LoRA), or,
        for a PEFT model, its trainable norms are not part of its payload.
    ValueError
        The model has no normalization layer at all.

    Examples
    --------
    >>> from torch import nn
    >>> selector = norm_selector(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)))
    >>> selector.select(["0.weight", "0.bias", "1.weight", "1.bias"])
    ('1.weight', '1.bias')
    """
    from fedlns_core import NormSelector

    names = norm_parameter_names(model)
    if names:
        return NormSelector(keys=names)
    trainable = [name for name, parameter in _norm_parameters(model) if parameter.requires_grad]
    if trainable:  # only a PEFT model gets here: its trainable norms are not in what it sends
        raise FrozenNormError(
            f"{len(trainable)} normalization parameters of the PEFT model train (e.g. {trainable[0]!r}) "
            "but get_peft_model_state_dict leaves them out, so the server never sees them. "
            "Remedy: fedlns_torch.make_norms_trainable(peft_config, base_model) before get_peft_model "
            "(it adds the norm modules to modules_to_save)."
        )
    frozen = norm_parameter_names(model, trainable_only=False) or tuple(name for name, _ in _norm_parameters(model))
    if frozen:
        modules = sorted({name.rsplit(".", 1)[0].rsplit(".", 1)[-1] for name in frozen})
        raise FrozenNormError(
            f"all {len(frozen)} normalization parameters of {type(model).__name__} are frozen "
            f"(requires_grad=False, e.g. {frozen[0]!r}), as in LoRA fine-tuning, so every "
            "client's normalization signature would be zero and FedLNS cannot screen. "
            "Remedy: train the norm layers too and send them: for PEFT, "
            "fedlns_torch.make_norms_trainable(peft_config, base_model), i.e. "
            f"LoraConfig(modules_to_save={modules!r}); otherwise param.requires_grad_(True) on "
            "them; or screen on other trainable parameters with "
            "fedlns_core.NormSelector(keys=[...])."
        )
    raise ValueError(
        f"{type(model).__name__} has no normalization layer (no module of a torch norm "
        "type and no class named '...Norm'); pass the parameter names to screen "
        "explicitly with fedlns_core.NormSelector(keys=[...])."
    )
