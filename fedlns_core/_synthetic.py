"""Synthetic federated rounds with GPT-2-style parameter names, for demos, tests and benchmarks.

Benign signatures share a round-wide drift that shrinks as training converges, plus a persistent
per-client offset (data heterogeneity) and per-coordinate noise whose scale differs across layers.
Attackers add a fixed shift of ``shift`` noise scales with random signs (a consistent change of
direction, as training towards corrupted targets produces), on top of the benign model.
"""

from __future__ import annotations

import numpy as np


class SyntheticFederation:
    """A population of ``n_clients`` of which the first ``malicious_fraction`` (shuffled) attack.

    Parameters
    ----------
    n_clients : int
        Population size K.
    malicious_fraction : float
        Fraction of the population that attacks, fixed for the run.
    n_layers, width : int
        Transformer blocks and hidden size: each block has ``ln_1`` and ``ln_2`` (weight, bias), plus a
        final ``ln_f``, so D = (4 * n_layers + 2) * width (12 layers x 256 gives the paper's D=12,800).
    shift : float
        Attacker offset, in units of the per-coordinate noise scale.
    heterogeneity : float
        Scale of each benign client's persistent offset, in noise units (non-IID data).
    seed : int
        Everything is reproducible from it.
    noise_df : float, optional
        Draw the per-round noise from a Student-t with this many degrees of freedom (> 2), scaled to
        unit variance, instead of a Gaussian: heavy-tailed benign updates. None (default) keeps the
        Gaussian draws, random stream included.
    """

    def __init__(
        self,
        n_clients: int = 200,
        malicious_fraction: float = 0.4,
        *,
        n_layers: int = 12,
        width: int = 256,
        shift: float = 1.5,
        heterogeneity: float = 0.3,
        seed: int = 0,
        noise_df: float | None = None,
    ):
        if noise_df is not None and not noise_df > 2:
            raise ValueError(f"noise_df must be above 2 (finite variance) or None, got {noise_df!r}")
        self.noise_df = noise_df
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.client_ids = list(range(n_clients))
        n_malicious = int(round(malicious_fraction * n_clients))
        self.malicious = frozenset(int(i) for i in rng.permutation(n_clients)[:n_malicious])
        self.norm_shapes = {}
        for layer in range(n_layers):
            for norm in ("ln_1", "ln_2"):
                for kind in ("weight", "bias"):
                    self.norm_shapes[f"transformer.h.{layer}.{norm}.{kind}"] = (width,)
        self.norm_shapes.update({"transformer.ln_f.weight": (width,), "transformer.ln_f.bias": (width,)})
        self.other_shapes = {
            "transformer.wte.weight": (32, 16),
            "transformer.h.0.attn.c_attn.weight": (16, 48),
            "transformer.h.0.attn.c_proj.bias": (16,),
        }
        dimension = sum(shape[0] for shape in self.norm_shapes.values())
        self.noise_scale = 1e-3 * np.exp(rng.normal(0.0, 0.5, dimension))  # (D,)
        self.base_drift = self.noise_scale * rng.normal(0.0, 2.0, dimension)  # (D,)
        self.client_offset = heterogeneity * self.noise_scale * rng.standard_normal((n_clients, dimension))
        self.attack_direction = shift * self.noise_scale * rng.choice([-1.0, 1.0], dimension)
        # float32 throughout: python scalars do not widen a float32 array
        self.global_params = {
            name: (1.0 if name.endswith("weight") and ".ln_" in name else 0.0)
            + 0.02 * rng.standard_normal(shape).astype(np.float32)
            for name, shape in {**self.norm_shapes, **self.other_shapes}.items()
        }

    @property
    def dimension(self) -> int:
        return self.noise_scale.size

    def signature(self, client_id: int, round_index: int) -> np.ndarray:
        """Flat signature (D,) of one client in one round."""
        decay = 1.0 / np.sqrt(1.0 + round_index / 10.0)
        if self.noise_df is None:
            noise = self.rng.standard_normal(self.dimension)
        else:  # unit variance: var(t_df) = df / (df - 2)
            noise = self.rng.standard_t(self.noise_df, self.dimension) * np.sqrt((self.noise_df - 2) / self.noise_df)
        value = decay * self.base_drift + self.client_offset[client_id] + self.noise_scale * noise
        if client_id in self.malicious:
            value = value + self.attack_direction
        return value

    def client_model(self, client_id: int, round_index: int) -> dict[str, np.ndarray]:
        """A returned model: the global one with the signature added to the norms and noise elsewhere."""
        flat, offset, model = self.signature(client_id, round_index), 0, {}
        for name, shape in self.norm_shapes.items():
            size = int(np.prod(shape))
            model[name] = (self.global_params[name] + flat[offset : offset + size]).astype(np.float32)
            offset += size
        for name, other_shape in self.other_shapes.items():
            model[name] = (self.global_params[name] + 1e-3 * self.rng.standard_normal(other_shape)).astype(np.float32)
        return model

    def sample_round(self, round_index: int, participation: float = 0.1):
        """Clients sampled uniformly without replacement, their models and example counts."""
        n_sampled = max(1, int(round(participation * len(self.client_ids))))
        sampled = sorted(int(i) for i in self.rng.choice(len(self.client_ids), n_sampled, replace=False))
        models = {client_id: self.client_model(client_id, round_index) for client_id in sampled}
        counts = {client_id: float(self.rng.integers(200, 400)) for client_id in sampled}
        return models, counts
