"""Conversion between PyTorch state dicts and named numpy dicts."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

# Dtypes that numpy cannot hold (bfloat16) or that lose precision in statistics
# (float16); both are widened to float32, which represents them exactly.
_WIDENED_DTYPES = (torch.bfloat16, torch.float16)


def _storage_key(tensor: torch.Tensor) -> tuple:
    """Identify the memory a tensor views: two keys alias iff they are equal."""
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )


def _as_state_dict(model_or_state_dict) -> Mapping[str, torch.Tensor]:
    if isinstance(model_or_state_dict, nn.Module):
        return model_or_state_dict.state_dict()
    if isinstance(model_or_state_dict, Mapping):
        return model_or_state_dict
    raise TypeError(
        f"expected a torch.nn.Module or a state dict (Mapping[str, Tensor]), got {type(model_or_state_dict).__name__}"
    )


def tied_keys(model_or_state_dict) -> dict[str, str]:
    """Find state-dict keys that alias an earlier key (tied weights).

    Parameters
    ----------
    model_or_state_dict : torch.nn.Module or Mapping[str, torch.Tensor]
        A model, or a state dict whose tensors still share memory as in the model.

    Returns
    -------
    dict[str, str]
        ``{alias: source}`` for each key whose tensor views exactly the memory of a key
        that comes earlier in state-dict order (e.g. GPT-2's ``lm_head.weight`` ->
        ``transformer.wte.weight``). Empty when nothing is tied.

    Examples
    --------
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    >>> model[1].weight = model[0].weight
    >>> tied_keys(model)
    {'1.weight': '0.weight'}
    """
    state_dict = _as_state_dict(model_or_state_dict)
    first_key: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for key, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        if tensor.numel() == 0 or tensor.device.type == "meta":
            continue  # no memory to share: distinct empty/meta tensors would look alike
        storage = _storage_key(tensor)
        if storage in first_key:
            aliases[key] = first_key[storage]
        else:
            first_key[storage] = key
    return aliases


def state_dict_to_numpy(model_or_state_dict) -> dict[str, np.ndarray]:
    """Convert a model's state dict to a named numpy dict, each tied tensor once.

    Parameters
    ----------
    model_or_state_dict : torch.nn.Module or Mapping[str, torch.Tensor]
        The model (its ``state_dict()`` is used) or a state dict.

    Returns
    -------
    dict[str, numpy.ndarray]
        One array per state-dict key, in state-dict order, without the keys that
        alias an earlier key (see :func:`tied_keys`). CPU tensors of a numpy dtype are
        returned **without a copy** (the arrays share memory with the model: copy them
        before training the model further if you need the old values). bfloat16 and
        float16 tensors are widened to float32; tensors on other devices are moved to
        the CPU (both of these copy).

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> layer = nn.LayerNorm(3).to(torch.bfloat16)
    >>> arrays = state_dict_to_numpy(layer)
    >>> sorted(arrays), arrays["weight"].dtype
    (['bias', 'weight'], dtype('float32'))
    """
    state_dict = _as_state_dict(model_or_state_dict)
    aliases = tied_keys(state_dict)
    arrays: dict[str, np.ndarray] = {}
    for key, tensor in state_dict.items():
        if key in aliases:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state dict key {key!r} holds {type(tensor).__name__}, not a tensor")
        arrays[key] = tensor_to_numpy(tensor)
    return arrays


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """One tensor as a numpy array: detached, half precision widened to float32, on the CPU.

    A CPU tensor of a numpy dtype is returned without a copy (the array shares its memory).
    """
    tensor = tensor.detach()
    if tensor.dtype in _WIDENED_DTYPES:
        tensor = tensor.to(torch.float32)
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    # Tensor.numpy() shares memory with a CPU tensor; conjugate/neg views are resolved first so
    # numpy sees plain memory.
    return tensor.resolve_conj().resolve_neg().numpy()


def _to_tensor(value) -> torch.Tensor:
    """Wrap an array as a CPU tensor; read-only arrays are copied (torch needs writable memory)."""
    array = np.asarray(value)
    if not array.flags.writeable:
        return torch.tensor(array)
    return torch.from_numpy(array)


def _check_arrays(state_dict: Mapping[str, torch.Tensor], arrays: Mapping[str, np.ndarray], strict: bool) -> None:
    """Validate names and shapes of ``arrays`` against a reference state dict (a model's or a PEFT payload)."""
    aliases = tied_keys(state_dict)
    expected = [key for key in state_dict if key not in aliases]
    unknown = sorted(set(arrays) - set(state_dict))
    if unknown:
        raise KeyError(f"keys not in the model's state dict: {unknown[:5]}" + (" ..." if len(unknown) > 5 else ""))
    if strict:
        missing = [key for key in expected if key not in arrays]
        if missing:
            raise KeyError(
                f"{len(missing)} state-dict keys missing from the arrays, e.g. {missing[:5]} "
                "(pass strict=False to load a subset)"
            )
    for key, value in arrays.items():
        shape = tuple(np.shape(value))
        if shape != tuple(state_dict[key].shape):
            raise ValueError(f"key {key!r} has shape {shape}, expected {tuple(state_dict[key].shape)}")


def _new_tensors(state_dict: Mapping[str, torch.Tensor], arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """New tensors for the keys of ``state_dict`` that ``arrays`` covers, tied aliases filled from their source."""
    aliases = tied_keys(state_dict)
    new_state: dict[str, torch.Tensor] = {}
    for key, reference in state_dict.items():
        source_key = key if key in arrays else aliases.get(key)
        if source_key is None or source_key not in arrays:
            continue
        value = _to_tensor(arrays[source_key])
        new_state[key] = value.to(device=reference.device, dtype=reference.dtype, copy=True)
    return new_state


def load_numpy_into_model(model: nn.Module, arrays: Mapping[str, np.ndarray], *, strict: bool = True) -> None:
    """Copy named numpy arrays into a model's tensors, in the model's dtype and device.

    Parameters
    ----------
    model : torch.nn.Module
        Model to update in place. Each tensor keeps its dtype (e.g. bfloat16) and device.
    arrays : Mapping[str, numpy.ndarray]
        Arrays named by state-dict keys, as from :func:`state_dict_to_numpy`. Tied
        aliases (e.g. ``lm_head.weight``) may be absent: writing the source key updates
        them too. If both are given, the source is written last, so it wins.
    strict : bool, default True
        Require every non-alias state-dict key to be present.

    Raises
    ------
    KeyError
        An unknown key, or (with ``strict``) a missing one.
    ValueError
        A shape that differs from the model's.

    Examples
    --------
    >>> import numpy as np
    >>> from torch import nn
    >>> layer = nn.LayerNorm(2)
    >>> load_numpy_into_model(layer, {"weight": np.array([2.0, 3.0]), "bias": np.zeros(2)})
    >>> layer.weight.tolist()
    [2.0, 3.0]
    """
    state_dict = model.state_dict()
    _check_arrays(state_dict, arrays, strict)
    aliases = tied_keys(state_dict)
    # Aliases first, sources last: a source value is never overwritten by its alias.
    order = sorted(arrays, key=lambda key: key not in aliases)
    with torch.no_grad():
        for key in order:
            target = state_dict[key]
            source = _to_tensor(arrays[key])
            # copy_ converts dtype (float32 -> bfloat16 ...) and device in one step.
            target.copy_(source)


def numpy_to_state_dict(
    arrays: Mapping[str, np.ndarray], model: nn.Module, *, strict: bool = True
) -> dict[str, torch.Tensor]:
    """Build a new state dict from named arrays, in the dtypes and devices of ``model``.

    Parameters
    ----------
    arrays : Mapping[str, numpy.ndarray]
        Arrays named by state-dict keys.
    model : torch.nn.Module
        Reference for key set, shapes, dtypes and devices; it is not modified.
    strict : bool, default True
        Require every non-alias state-dict key to be present.

    Returns
    -------
    dict[str, torch.Tensor]
        New tensors (never views of ``arrays``), including tied aliases filled from
        their source, ready for ``model.load_state_dict``.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from torch import nn
    >>> layer = nn.LayerNorm(2).to(torch.float16)
    >>> state = numpy_to_state_dict({"weight": np.ones(2), "bias": np.zeros(2)}, layer)
    >>> state["weight"].dtype
    torch.float16
    """
    state_dict = model.state_dict()
    _check_arrays(state_dict, arrays, strict)
    return _new_tensors(state_dict, arrays)
