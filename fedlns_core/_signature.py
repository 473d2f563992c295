"""Which parameters form the signature, and the signature itself (eqs. sig_layer, sig_struct)."""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ._lora import COLUMN_NORMS, MAGNITUDE, ROW_NORMS, change_norms, lora_entries, lora_pairs
from ._types import ParamDict

# A module name is a normalization layer when one of its words (split at '_' and camelCase) is one of
# these, or 'ln'/'norm' followed by digits (ln1, norm2). This covers GPT-2 (ln_1, ln_2, ln_f), BERT
# (LayerNorm), LLaMA/Mistral/Qwen (input_layernorm, post_attention_layernorm, norm), T5
# (layer_norm, final_layer_norm), Qwen3 (q_norm, k_norm) and norm1/norm2 naming.
_NORM_WORDS = frozenset({"ln", "norm", "layernorm", "rmsnorm", "groupnorm"})
_NUMBERED_NORM = re.compile(r"^(ln|norm)\d+$")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _is_norm_module(module: str) -> bool:
    words = _CAMEL_BOUNDARY.sub("_", module).lower().split("_")
    return any(word in _NORM_WORDS or _NUMBERED_NORM.match(word) for word in words)


# PEFT's LN-tuning sends a tuned module `X` as `X.ln_tuning_layers.weight`: the module is `X`, and the
# wrapper's own name (which contains the word "ln") must not make any LN-tuned module look like a norm.
_PEFT_WRAPPER_SEGMENTS = frozenset({"ln_tuning_layers"})


def _auto_match(name: str) -> bool:
    parts = name.split(".")
    if len(parts) >= 3 and parts[-2] in _PEFT_WRAPPER_SEGMENTS:
        parts = parts[:-2] + parts[-1:]
    return len(parts) >= 2 and parts[-1].lower() in ("weight", "bias") and _is_norm_module(parts[-2])


def _paper_match(name: str) -> bool:
    # tab:app_fedlns_details: the name contains "ln" or "layernorm" and ends with "weight" or "bias".
    # Compared in lower case: the experiments screened BERT, whose "LayerNorm" matches only that way.
    lower = name.lower()
    return ("ln" in lower or "layernorm" in lower) and lower.endswith(("weight", "bias"))


#: ``NormSelector(match=...)``'s name-matching schemes.
NAME_MATCHES = {"auto": _auto_match, "paper": _paper_match}


class NormSelector:
    """Choose the normalization-layer parameters that make up a client's signature.

    Parameters
    ----------
    match : {"auto", "paper"}, default="auto"
        How names are matched. ``"auto"`` selects the weight and bias of every module whose name is a
        normalization layer (case-insensitive; GPT-2 ``ln_1``/``ln_2``/``ln_f``, BERT ``LayerNorm``, LLaMA-style
        ``input_layernorm``/``post_attention_layernorm``/``norm``, T5 ``layer_norm``, ``norm1``...),
        also in PEFT payloads (``get_peft_model_state_dict``): ``modules_to_save`` norms keep their own
        names there, and an LN-tuned module ``X`` is sent as ``X.ln_tuning_layers.weight``.
        ``"paper"`` is the naming rule of the paper's Table ``tab:app_fedlns_details``: the name contains
        ``ln`` or ``layernorm`` and ends with ``weight`` or ``bias`` (it misses LLaMA's final
        ``model.norm.weight``). Ignored when ``patterns`` or ``keys`` is given.
    patterns : sequence of str, optional
        Regular expressions; a name is selected when any of them matches (``re.search``).
    keys : sequence of str, optional
        An explicit list of names. Every one of them must be present when selecting.
    rule : {"auto", "paper"}, optional
        Deprecated name of ``match`` (a ``FutureWarning``); "rule" is the screener's ``retain_rule``.

    Examples
    --------
    >>> names = ["transformer.wte.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.ln_1.bias",
    ...          "transformer.h.0.attn.c_proj.bias", "transformer.ln_f.weight", "lm_head.weight"]
    >>> NormSelector().select(names)
    ('transformer.h.0.ln_1.weight', 'transformer.h.0.ln_1.bias', 'transformer.ln_f.weight')
    >>> NormSelector(match="paper").select(["model.layers.0.input_layernorm.weight", "model.norm.weight"])
    ('model.layers.0.input_layernorm.weight',)
    """

    def __init__(
        self,
        *,
        match: str = "auto",
        patterns: Sequence[str] | None = None,
        keys: Sequence[str] | None = None,
        rule: str | None = None,
    ):
        if rule is not None:
            warnings.warn(
                "NormSelector(rule=...) is now NormSelector(match=...); rule= will be removed",
                FutureWarning,
                stacklevel=2,
            )
            match = rule
        self.match = match
        self.patterns = patterns
        self.keys = keys

    def select(self, names: Iterable[str]) -> tuple[str, ...]:
        """Return the selected names, in the order given.

        Raises ``ValueError`` when nothing is selected or an explicit key is absent.
        """
        names = list(names)
        if self.keys is not None:
            present = set(names)
            not_strings = [key for key in self.keys if not isinstance(key, str)]
            if not_strings:
                raise TypeError(f"NormSelector keys must be str, got {not_strings[0]!r}")
            absent = [key for key in self.keys if key not in present]
            if absent:
                raise ValueError(f"NormSelector: key {absent[0]!r} is not among the model's parameters")
            chosen = set(self.keys)
            selected = tuple(name for name in names if name in chosen)
        elif self.patterns is not None:
            if isinstance(self.patterns, str):
                raise TypeError("NormSelector patterns must be a sequence of regular expressions, not a str")
            compiled = [re.compile(pattern) for pattern in self.patterns]
            selected = tuple(name for name in names if any(regex.search(name) for regex in compiled))
        else:
            if not isinstance(self.match, str) or self.match not in NAME_MATCHES:
                raise ValueError(
                    f"NormSelector: match must be one of {', '.join(map(repr, NAME_MATCHES))}, got {self.match!r}"
                )
            matches = NAME_MATCHES[self.match]
            selected = tuple(name for name in names if matches(name))
        if not selected:
            raise ValueError(
                f"NormSelector({self._describe()}) matched none of the {len(names)} parameter names "
                f"(e.g. {names[:3]!r}); pass patterns= or keys= naming the normalization parameters"
            )
        return selected

    def _describe(self) -> str:
        if self.keys is not None:
            return f"keys={list(self.keys)!r}"
        if self.patterns is not None:
            return f"patterns={list(self.patterns)!r}"
        return f"match={self.match!r}"

    def __repr__(self) -> str:
        return f"NormSelector({self._describe()})"

    def to_config(self) -> dict:
        """A JSON-serialisable description, for saving a screener."""
        return {
            "match": self.match,
            "patterns": None if self.patterns is None else list(self.patterns),
            "keys": None if self.keys is None else list(self.keys),
        }


def extract_signature(global_params: ParamDict, client_params: ParamDict, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Layer-wise normalization signature ``s = p(local) - p(global)`` (eq. ``sig_layer``), in float64.

    Parameters
    ----------
    global_params, client_params : mapping of str to ndarray
        The broadcast global model and the model a client returned.
    keys : sequence of str
        The signature's parameter names (e.g. from :meth:`NormSelector.select`).

    Returns
    -------
    dict of str to ndarray
        One float64 array per key, with that parameter's shape; the ordered collection is eq. ``sig_struct``.

    Examples
    --------
    >>> g = {"ln.weight": np.ones(2, dtype=np.float32)}
    >>> c = {"ln.weight": np.array([1.5, 0.5], dtype=np.float32)}
    >>> extract_signature(g, c, ["ln.weight"])
    {'ln.weight': array([ 0.5, -0.5])}
    """
    signature = {}
    for key in keys:
        if key not in global_params or key not in client_params:
            side = "global_params" if key not in global_params else "client_params"
            raise KeyError(f"signature key {key!r} is missing from {side}")
        local = np.asarray(client_params[key], dtype=np.float64)
        reference = np.asarray(global_params[key], dtype=np.float64)
        if local.shape != reference.shape:
            raise ValueError(f"signature key {key!r} has shape {local.shape}, expected {reference.shape}")
        signature[key] = local - reference
    return signature


def flat_signature(
    global_params: Mapping[str, np.ndarray],
    client_params: Mapping[str, np.ndarray],
    keys: Sequence[str],
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Concatenation of the signature in ``keys`` order, shape (D,), float64 (eq. z_full's layout).

    Each part is written straight into ``out`` (a new array by default): the same values as concatenating
    :func:`extract_signature`'s arrays, without building them first.
    """
    references = []
    for key in keys:
        if key not in global_params or key not in client_params:
            side = "global_params" if key not in global_params else "client_params"
            raise KeyError(f"signature key {key!r} is missing from {side}")
        reference = np.asarray(global_params[key])
        if np.shape(client_params[key]) != reference.shape:
            raise ValueError(
                f"signature key {key!r} has shape {np.shape(client_params[key])}, expected {reference.shape}"
            )
        references.append(reference)
    size = sum(reference.size for reference in references)
    if out is None:
        out = np.empty(size)
    elif out.shape != (size,) or out.dtype != np.float64:
        raise ValueError(f"out must be a float64 array of shape ({size},), got {out.dtype} {out.shape}")
    offset = 0
    for key, reference in zip(keys, references):
        part = out[offset : offset + reference.size].reshape(reference.shape)
        np.subtract(client_params[key], reference, out=part, dtype=np.float64)  # exact for float32 inputs
        offset += reference.size
    return out


#: ``FedLNS(signature=...)``: which statistic of a client's payload is banked and screened.
SIGNATURES = ("auto", "norm", "lora")
_LORA_STATISTICS = {COLUMN_NORMS: "columns", ROW_NORMS: "rows"}


@dataclass(frozen=True)
class SignatureLayout:
    """The signature a screener reads from each payload: its entries (sorted names: the bank's layout), the
    payload key each entry is computed from and how: ``"delta"`` (a normalization parameter's change, eq.
    ``sig_layer``), ``"columns"`` or ``"rows"`` (the column or row norms of a LoRA factor's change,
    ``fedlns_core._lora``) or ``"magnitude"`` (a DoRA magnitude vector's change)."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    sources: tuple[str, ...]
    statistics: tuple[str, ...]

    @functools.cached_property
    def sizes(self) -> tuple[int, ...]:
        """The number of values of each entry."""
        return tuple(math.prod(shape) for shape in self.shapes)

    @functools.cached_property
    def width(self) -> int:
        return sum(self.sizes)

    @property
    def kind(self) -> str:
        """``"norm"``, ``"lora"`` or ``"lora+norm"``: the parts the signature holds."""
        parts = {"norm" if statistic == "delta" else "lora" for statistic in self.statistics}
        return "+".join(sorted(parts))

    def write(
        self, global_params: Mapping[str, np.ndarray], client_params: Mapping[str, np.ndarray], out: np.ndarray
    ) -> None:
        """The client's signature, flattened in ``keys`` order, into the float64 array ``out`` of length
        :attr:`width` (for norm entries the values of :func:`flat_signature`)."""
        offset = 0
        for size, source, statistic in zip(self.sizes, self.sources, self.statistics):
            part = out[offset : offset + size]
            if statistic in ("delta", "magnitude"):
                destination = part.reshape(np.shape(global_params[source]))  # a convolution's DoRA magnitude is 4-D
                np.subtract(client_params[source], global_params[source], out=destination, dtype=np.float64)
            else:
                change_norms(client_params[source], global_params[source], statistic, part)
            offset += size


def signature_layout(
    signature: str,
    global_params: Mapping[str, np.ndarray],
    selector: NormSelector,
    clients: Sequence[Mapping[str, np.ndarray]] = (),
    bank_keys: Sequence[str] = (),
) -> SignatureLayout:
    """The layout ``FedLNS(signature=...)`` reads from payloads shaped like ``global_params``.

    ``"norm"``: the entries ``selector`` picks (eq. ``sig_layer``). ``"lora"``: the LoRA signature of every LoRA
    module (``fedlns_core._lora``). ``"auto"``: what the history bank already holds (``bank_keys``), else, at the
    first round, the LoRA signature where the payload holds LoRA factors and the normalization entries where it
    holds them, both where both; beside LoRA factors the norms count only when at least half of the round's
    ``clients`` changed them (frozen norms sent back unchanged would dilute the score with zeros).

    Raises ``ValueError`` when the payload has nothing of the requested kind.
    """
    if signature == "auto" and bank_keys:
        return _layout_from_names(bank_keys, global_params)
    pairs = lora_pairs(global_params) if signature in ("auto", "lora") else []
    if signature == "lora" and not pairs:
        raise ValueError(
            f"signature='lora' needs LoRA factors (PEFT's <module>.lora_A[.weight] or <module>.lora_embedding_A "
            f"with its B twin) in the payload; got keys such as {sorted(global_params)[:3]}"
        )
    norms: tuple[str, ...] = ()
    if signature == "norm":
        norms = selector.select(global_params)
    elif signature == "auto":
        try:
            norms = selector.select(global_params)
        except ValueError:
            if not pairs:
                raise ValueError(
                    f"signature='auto' found neither LoRA factors (PEFT's <module>.lora_A[.weight] or "
                    f"<module>.lora_embedding_A with its B twin) nor normalization parameters ({selector!r}) "
                    f"among the payload's keys, such as {sorted(global_params)[:3]}; name the per-channel "
                    "parameters to read with selector=NormSelector(patterns=...) (e.g. r'\\.ia3_l$' for IA3)"
                ) from None
        if (
            pairs
            and norms
            and clients
            and 2 * sum(_changed(client, global_params, norms) for client in clients) < len(clients)
        ):
            norms = ()
    entries = [(key, key, "delta", tuple(np.shape(global_params[key]))) for key in norms]
    entries += [
        (name, source, statistic, (length,)) for name, source, statistic, length in lora_entries(pairs, global_params)
    ]
    entries.sort()
    return SignatureLayout(
        tuple(entry[0] for entry in entries),
        tuple(entry[3] for entry in entries),
        tuple(entry[1] for entry in entries),
        tuple(entry[2] for entry in entries),
    )


def _is_magnitude(name: str) -> bool:
    parts = name.split(".")
    return MAGNITUDE in parts[-3:]


def _changed(client: Mapping[str, np.ndarray], global_params: Mapping[str, np.ndarray], keys) -> bool:
    return any(not np.array_equal(client[key], global_params[key]) for key in keys)


def _layout_from_names(names: Sequence[str], global_params: Mapping[str, np.ndarray]) -> SignatureLayout:
    """The layout whose entries are ``names`` (a bank's), read from payloads shaped like ``global_params``."""
    keys, shapes, sources, statistics = [], [], [], []
    for name in names:
        suffix = next((suffix for suffix in _LORA_STATISTICS if name.endswith(suffix)), None)
        source = name[: -len(suffix)] if suffix else name
        if source not in global_params:
            raise ValueError(
                f"the history bank's signature entry {name!r} reads {source!r}, which the payload does not hold"
            )
        shape = np.shape(global_params[source])
        if suffix:
            if len(shape) < 2:
                raise ValueError(f"the history bank's LoRA entry {name!r} needs a factor {source!r}, got {shape}")
            shape = (math.prod(shape[1:]),) if _LORA_STATISTICS[suffix] == "columns" else (shape[0],)
        elif _is_magnitude(name):
            shape = (math.prod(shape),)  # as lora_entries lays it out
        keys.append(name)
        shapes.append(tuple(shape))
        sources.append(source)
        statistics.append(_LORA_STATISTICS[suffix] if suffix else "magnitude" if _is_magnitude(name) else "delta")
    return SignatureLayout(tuple(keys), tuple(shapes), tuple(sources), tuple(statistics))
