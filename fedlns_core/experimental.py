"""Experimental: a LoRA-native signature for payloads whose normalization layers stay frozen.

FedLNS screens clients by how their normalization parameters changed. In the default recipe of federated LLM
fine-tuning stacks the norms are frozen and never sent (``docs/peft.md`` shows how to send them). When that cannot
be changed, :func:`lora_signature` gives the screener a compact stand-in computed from the LoRA adapters
themselves: per LoRA module, how much each input and each output direction of the adapter changed. The bank,
the median/MAD standardization and the mixture run on it unchanged; only the decision comes from this view, and
the round is aggregated from the real payloads.

It was measured in one setting only (the reference simulator's ``lora`` preset: a pretrained GPT fine-tuned with
LoRA on StackOverflow posts, 40% of clients training on corrupted targets; ``docs/results/lora``), where it
separated attackers from benign clients; it has not been tested against attacks that know it. Its statistics are
magnitudes of change, so an attacker who scales its adapter change down to the benign range is its obvious
evasion. The API may change.

Examples
--------
>>> import numpy as np
>>> from fedlns_core import FedLNS
>>> rng = np.random.default_rng(0)
>>> start = {"q.lora_A.weight": rng.normal(size=(2, 6)), "q.lora_B.weight": np.zeros((6, 2))}
>>> def trained(scale):
...     return {k: v + scale * rng.normal(size=v.shape) for k, v in start.items()}
>>> sent = {c: trained(0.01) for c in range(8)} | {8: trained(0.5), 9: trained(0.5)}
>>> screener = FedLNS(selector=lora_selector(), activation_threshold=0, random_state=0)
>>> result = screener.screen(*lora_signature(start, sent), {c: 1 for c in sent})   # example counts
>>> sorted(result.rejected)
[8, 9]
>>> new_global = result.aggregate(start, sent)       # the real payloads of the retained clients
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._signature import NormSelector

#: Key infix of the signature entries :func:`lora_signature` returns.
LORA_SIGNATURE_INFIX = ".lora_signature."
_A, _B = ".lora_A.weight", ".lora_B.weight"


def lora_selector() -> NormSelector:
    """The selector that picks :func:`lora_signature`'s entries (pass it as ``FedLNS(selector=...)``)."""
    return NormSelector(patterns=[LORA_SIGNATURE_INFIX.replace(".", r"\.")])


def lora_signature(global_params: Mapping[str, np.ndarray], client_params: Mapping) -> tuple[dict, dict]:
    """The screener's input built from LoRA adapters: ``(global_view, {client: view})``.

    For every LoRA module of ``global_params`` (a pair of keys ``<module>.lora_A.weight`` of shape (r, d_in) and
    ``<module>.lora_B.weight`` of shape (d_out, r), as in a PEFT payload), a client's view holds the column norms
    of its change in A (``<module>.lora_signature.A``, d_in values) and the row norms of its change in B
    (``<module>.lora_signature.B``, d_out values). The global view is zeros of the same shapes, so that the
    screener's deltas are these statistics.

    Parameters
    ----------
    global_params : Mapping[str, numpy.ndarray]
        The global payload the clients started from.
    client_params : Mapping[client id, Mapping[str, numpy.ndarray]]
        Each client's returned payload.

    Raises
    ------
    ValueError
        ``global_params`` has no LoRA module, a client lacks one of its entries, or a shape differs.
    """
    modules = sorted(key[: -len(_A)] for key in global_params if key.endswith(_A) and key[: -len(_A)] + _B
                     in global_params)
    if not modules:
        raise ValueError(f"lora_signature needs LoRA entries (<module>{_A} and <module>{_B}) in the payload; "
                         f"got keys such as {sorted(global_params)[:3]}")
    reference = {key: np.asarray(global_params[module + suffix], dtype=np.float64)
                 for module in modules for key, suffix in ((module + _A, _A), (module + _B, _B))}

    def view(client, params):
        out = {}
        for module in modules:
            changes = []
            for suffix in (_A, _B):
                if module + suffix not in params:
                    raise ValueError(f"client {client!r} did not send {module + suffix!r}")
                value = np.asarray(params[module + suffix], dtype=np.float64)
                if value.shape != reference[module + suffix].shape:
                    raise ValueError(f"client {client!r}: {module + suffix!r} has shape {value.shape}, the global "
                                     f"one {reference[module + suffix].shape}")
                changes.append(value - reference[module + suffix])
            out[f"{module}{LORA_SIGNATURE_INFIX}A"] = np.linalg.norm(changes[0], axis=0)
            out[f"{module}{LORA_SIGNATURE_INFIX}B"] = np.linalg.norm(changes[1], axis=1)
        return out

    clients = {client: view(client, params) for client, params in client_params.items()}
    zeros = {f"{module}{LORA_SIGNATURE_INFIX}{part}": np.zeros(reference[module + suffix].shape[axis])
             for module in modules for part, suffix, axis in (("A", _A, 1), ("B", _B, 0))}
    return zeros, clients
