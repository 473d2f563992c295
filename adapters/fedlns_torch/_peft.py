"""PEFT models: their payload as named numpy arrays, and the norm layers made trainable and sent.

A PEFT client sends ``peft.get_peft_model_state_dict(model)``, not ``model.state_dict()``: only
the adapter weights and the ``modules_to_save`` copies, under keys that drop the adapter name
and the wrapper names (``...input_layernorm.modules_to_save.default.weight`` is sent as
``...input_layernorm.weight``). Everything here speaks in those payload keys. ``peft`` is
imported only inside the functions that need it.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from fedlns_torch._convert import _check_arrays, _new_tensors, _storage_key, state_dict_to_numpy
from fedlns_torch._norm_layers import FrozenNormError, _is_norm_module


def is_peft_model(model) -> bool:
    """True for a ``peft.PeftModel`` (without importing peft when nothing imported it yet)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def _require_peft_model(model) -> None:
    if not is_peft_model(model):
        raise TypeError(f"expected a peft.PeftModel (from peft.get_peft_model), got {type(model).__name__}")


def _payload(model, adapter_name: str | None) -> dict[str, torch.Tensor]:
    """``get_peft_model_state_dict`` of the active (or the named) adapter."""
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, adapter_name=adapter_name or model.active_adapter)


def payload_keys_of(model, names, *, adapter_name: str | None = None) -> dict[str, str]:
    """``{state-dict name: payload key}`` for those of ``names`` that the PEFT payload carries.

    peft drops ``modules_to_save.<adapter>.`` from the name of a saved module's copy and the
    adapter name after ``ln_tuning_layers``; a name counts only if that key is in the payload
    and (outside the meta device) views the same memory as the parameter.
    """
    adapter_name = adapter_name or model.active_adapter
    payload = _payload(model, adapter_name)
    state_dict = model.state_dict()
    found = {}
    for name in names:
        key = name.replace(f".modules_to_save.{adapter_name}.", ".").replace(
            f".ln_tuning_layers.{adapter_name}.", ".ln_tuning_layers."
        )
        sent = payload.get(key)
        if sent is None:
            continue
        if sent.device.type != "meta" and _storage_key(sent) != _storage_key(state_dict[name]):
            continue  # a payload entry of that name, but not this parameter
        found[name] = key
    return found


def lora_parameter_names(model, *, adapter_name: str | None = None) -> tuple[str, ...]:
    """Payload keys of the LoRA factors (``lora_A``, ``lora_B``) and DoRA magnitude vectors of a PEFT model's
    active (or named) adapter: what ``FedLNS(signature="lora")`` (and ``"auto"``) reads from the payload, by
    :func:`fedlns_core.lora_payload_keys`. Empty for an adapter without LoRA factors (prefix tuning, IA3, ...).
    """
    from fedlns_core import lora_payload_keys

    _require_peft_model(model)
    return lora_payload_keys(peft_state_dict_to_numpy(model, adapter_name=adapter_name))


def peft_state_dict_to_numpy(model, *, adapter_name: str | None = None) -> dict[str, np.ndarray]:
    """A PEFT model's payload (``get_peft_model_state_dict``) as a named numpy dict.

    Parameters
    ----------
    model : peft.PeftModel
        The client's model.
    adapter_name : str, optional
        The adapter to send; default the active one.

    Returns
    -------
    dict[str, numpy.ndarray]
        One array per payload key, as :func:`fedlns_torch.state_dict_to_numpy` converts
        them (half precision widened to float32; CPU float32 arrays share memory with the
        model, so copy them before training on if you keep them).

    Examples
    --------
    >>> import transformers
    >>> from peft import LoraConfig, get_peft_model
    >>> config = transformers.LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16,
    ...                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    >>> base = transformers.LlamaForCausalLM(config)
    >>> model = get_peft_model(base, make_norms_trainable(LoraConfig(r=2, target_modules=["q_proj"]), base))
    >>> sorted(peft_state_dict_to_numpy(model))  # doctest: +NORMALIZE_WHITESPACE
    ['base_model.model.model.layers.0.input_layernorm.weight',
     'base_model.model.model.layers.0.post_attention_layernorm.weight',
     'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight',
     'base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight',
     'base_model.model.model.norm.weight']
    """
    _require_peft_model(model)
    return state_dict_to_numpy(_payload(model, adapter_name))


def load_numpy_into_peft_model(
    model, arrays: Mapping[str, np.ndarray], *, adapter_name: str | None = None, strict: bool = True
) -> None:
    """Load a payload dict (as from :func:`peft_state_dict_to_numpy`) into a PEFT model, in place.

    The arrays are checked against the model's own payload (keys and shapes), converted to
    each tensor's dtype and device, and loaded with ``peft.set_peft_model_state_dict``.

    Parameters
    ----------
    model : peft.PeftModel
        Model to update; the base weights are not touched.
    arrays : Mapping[str, numpy.ndarray]
        Arrays named by payload keys. They are not modified.
    adapter_name : str, optional
        The adapter to load into; default the active one.
    strict : bool, default True
        Require every payload key to be present; otherwise the absent ones keep their values.

    Raises
    ------
    KeyError
        A key the payload does not have, or (with ``strict``) a missing one.
    ValueError
        A shape that differs from the model's.
    """
    from peft import set_peft_model_state_dict

    _require_peft_model(model)
    adapter_name = adapter_name or model.active_adapter
    payload = _payload(model, adapter_name)
    _check_arrays(payload, arrays, strict)
    tensors = _new_tensors(payload, arrays)
    # peft loads a payload only whole: keys left out (strict=False) keep the model's current values.
    tensors = {key: tensors[key] if key in tensors else tensor.detach().clone() for key, tensor in payload.items()}
    outcome = set_peft_model_state_dict(model, tensors, adapter_name=adapter_name)
    unexpected = list(getattr(outcome, "unexpected_keys", []))
    if unexpected:  # peft could not place keys that its own payload has: refuse silently partial loads
        raise KeyError(f"peft did not load {len(unexpected)} payload keys, e.g. {unexpected[:3]}")


# ------------------------------------------------------------------ making norms trainable


def _peft_wrapper_types() -> tuple[type, ...]:
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    return (BaseTunerLayer, AuxiliaryTrainingWrapper)


def _norm_module_paths(model: nn.Module) -> tuple[list[str], list[str]]:
    """(paths of plain norm modules, paths of PEFT wrappers around a norm), copies inside wrappers skipped."""
    wrappers = _peft_wrapper_types()
    inside_wrapper: list[str] = []
    plain, wrapped = [], []
    for path, module in model.named_modules():
        if any(path.startswith(prefix + ".") for prefix in inside_wrapper):
            continue
        if isinstance(module, wrappers):
            inside_wrapper.append(path)
            # ModulesToSaveWrapper keeps the original as original_module, LN-tuning as base_layer.
            inner = getattr(module, "original_module", None)
            inner = getattr(module, "base_layer", None) if inner is None else inner
            if isinstance(inner, nn.Module) and _is_norm_module(inner):
                wrapped.append(path)
            continue
        if _is_norm_module(module) and any(True for _ in module.parameters(recurse=False)):
            plain.append(path)
    return plain, wrapped


def _check_norms_are_float(model: nn.Module, paths: list[str]) -> None:
    modules = dict(model.named_modules())
    for path in paths:
        for name, parameter in modules[path].named_parameters(recurse=False):
            if not parameter.is_floating_point():
                raise FrozenNormError(
                    f"norm parameter '{path}.{name}' is stored as {parameter.dtype} (quantized), so it "
                    "cannot be trained; load the model with its normalization layers in floating point "
                    "(bitsandbytes 4/8-bit keeps them so; other quantizers may need them in their skip list)"
                )


def _module_names_to_save(model: nn.Module, paths: list[str]) -> list[str]:
    """Short names (``input_layernorm``) where they pick out norm modules only, full paths otherwise.

    peft wraps every module whose path *ends with* an entry of ``modules_to_save`` (a plain
    string suffix), so a short name is safe only if no other module's path ends with it.
    """
    all_paths = [path for path, _ in model.named_modules(remove_duplicate=False)]
    norm_paths = set(paths)
    names: list[str] = []
    for path in paths:
        short = path.rsplit(".", 1)[-1]
        if short in names or path in names:
            continue
        if all(candidate in norm_paths for candidate in all_paths if candidate.endswith(short)):
            names.append(short)
        elif all(candidate in norm_paths for candidate in all_paths if candidate.endswith(path)):
            names.append(path)
        else:
            raise ValueError(f"cannot name norm module {path!r} for modules_to_save without also naming other modules")
    return names


def make_norms_trainable(peft_config_or_model, model: nn.Module | None = None):
    """Make a PEFT setup train the normalization layers and send them in its payload.

    FedLNS reads the change of the norm parameters, which LoRA freezes and leaves out of
    ``get_peft_model_state_dict``. This adds every normalization module of the model
    (found by type, as :func:`fedlns_torch.norm_parameter_names` does) to the config's
    ``modules_to_save``: peft then trains a full copy of each norm and sends it under the
    norm's own name, while the method (LoRA, ...) stays as it is. For LN-tuning
    (``LNTuningConfig``) the norms are its ``target_modules``.

    Parameters
    ----------
    peft_config_or_model : peft.PeftConfig or peft.PeftModel
        A config (``LoraConfig``, ``LNTuningConfig``, ...) before ``get_peft_model``, or a
        ``PeftModel`` already built with a method that has ``modules_to_save``.
    model : torch.nn.Module, optional
        With a config: the base model that will be wrapped (its norm module names are
        read, it is not modified). Not used with a ``PeftModel``.

    Returns
    -------
    peft.PeftConfig or peft.PeftModel
        For a config, a new config (the given one is not modified) to pass to
        ``get_peft_model``. For a ``PeftModel``, the same model with its norm modules
        wrapped in place, trainable and part of the payload (active adapter).

    Raises
    ------
    FrozenNormError
        The PEFT method has no ``modules_to_save`` (``AdaptionPromptConfig``,
        ``TrainableTokensConfig``, ``XLoraConfig``), an LN-tuning model misses some
        norms (build it again from the returned config), or a norm parameter is
        quantized.
    ValueError
        The model has no normalization layer.

    Examples
    --------
    >>> import transformers
    >>> from peft import LoraConfig
    >>> base = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=32))
    >>> config = make_norms_trainable(LoraConfig(r=4, target_modules=["c_attn"]), base)
    >>> config.modules_to_save
    ['ln_1', 'ln_2', 'ln_f']
    """
    from peft import LNTuningConfig, PeftConfig

    if is_peft_model(peft_config_or_model):
        return _wrap_norms_in_place(peft_config_or_model)
    if not isinstance(peft_config_or_model, PeftConfig):
        raise TypeError(f"expected a peft.PeftConfig or peft.PeftModel, got {type(peft_config_or_model).__name__}")
    config = peft_config_or_model
    if not isinstance(model, nn.Module):
        raise TypeError("make_norms_trainable(config, model): pass the base model whose norm layers should train")
    paths, wrapped = _norm_module_paths(model)
    if wrapped:
        raise TypeError("make_norms_trainable(config, model): pass the base model, not one PEFT has already wrapped")
    if not paths:
        raise ValueError(f"{type(model).__name__} has no normalization layer with parameters")
    _check_norms_are_float(model, paths)
    config = copy.deepcopy(config)
    if isinstance(config, LNTuningConfig):
        # LN-tuning matches target names exactly or as a ".name" suffix; full paths are always exact.
        targets = config.target_modules
        targets = [targets] if isinstance(targets, str) else list(targets or [])
        config.target_modules = targets + [path for path in paths if path not in targets]
        return config
    if not hasattr(config, "modules_to_save"):
        raise _no_modules_to_save(type(config).__name__)
    existing = list(config.modules_to_save or [])
    config.modules_to_save = existing + [name for name in _module_names_to_save(model, paths) if name not in existing]
    return config


def _no_modules_to_save(config_name: str) -> FrozenNormError:
    return FrozenNormError(
        f"{config_name} has no modules_to_save, so peft can neither train the normalization layers "
        "nor send them with this method; use LoRA (or another method with modules_to_save) or "
        "LNTuningConfig, or screen other parameters it sends with fedlns_core.NormSelector(keys=[...])"
    )


def _wrap_norms_in_place(model):
    """Add the norm modules to the active adapter's ``modules_to_save`` of a built PeftModel."""
    from peft import LNTuningConfig
    from peft.tuners.tuners_utils import BaseTuner
    from peft.utils.other import set_additional_trainable_modules

    adapter_name = model.active_adapter
    config = model.peft_config[adapter_name]
    base = model.base_model
    paths, wrapped = _norm_module_paths(base)
    if not paths and not wrapped:
        raise ValueError(f"{type(model.get_base_model()).__name__} has no normalization layer with parameters")
    if not paths:
        return model  # every norm is already a modules_to_save or LN-tuning module
    _check_norms_are_float(base, paths)
    if isinstance(config, LNTuningConfig):
        raise FrozenNormError(
            f"LN-tuning leaves {len(paths)} normalization modules untrained (e.g. {paths[0]!r}); "
            "peft cannot add LN-tuning targets to a built model: build it again with "
            "get_peft_model(base, make_norms_trainable(LNTuningConfig(...), base))"
        )
    if not hasattr(config, "modules_to_save"):
        raise _no_modules_to_save(type(config).__name__)
    names = _module_names_to_save(base, paths + wrapped)
    existing = list(config.modules_to_save or [])
    config.modules_to_save = existing + [name for name in names if name not in existing]
    set_additional_trainable_modules(
        model=base,
        peft_config=config,
        model_config=BaseTuner.get_model_config(model),
        adapter_name=adapter_name,
    )
    return model
