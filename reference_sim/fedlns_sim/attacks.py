"""Client attacks, behind one interface (``Attack``: what a malicious client declares and does each round).

An attack declares which local trainings a malicious client runs (``trainings``: poisoned, through ``apply``, which
rewrites one batch, or clean), keeps one model from them (``local_result``), and may then replace the models of
the round's malicious clients together (``craft``: model poisoning by colluding attackers). ``metrics`` adds
attack-specific measurements of the global model (the backdoor's success rate). Names are fixed: runs and tables
refer to them.

Data poisoning
  ``target_corruption``  the paper's attack (``tab:app_attack_config``): inputs unchanged, each supervised target
                         replaced with probability ``p_corr`` by a uniformly random valid token.
  ``backdoor``           a trigger phrase followed by a chosen continuation is written into a share of the
                         attackers' blocks (``attack_fraction``), so the model learns to continue the trigger with
                         the target; success = the share of target tokens the global model predicts after the
                         trigger on held-out evaluation blocks (causal) or at masked positions after it (BERT).
Model poisoning (the attackers first train honestly; they then send a crafted model. They collude and see the
round's benign updates: the standard omniscient setting of ByzFL, Blades and FLPoison, stated as such.)
  ``sign_flip``   the own update negated and scaled by ``attack_scale`` (default 1).
  ``scaling``     model replacement (Bagdasaryan et al., 2020): training on corrupted targets, then the update
                  multiplied by ``attack_scale`` (0 = the number of clients per round).
  ``gaussian``    an update of i.i.d. normal coordinates with standard deviation ``attack_noise``.
  ``alie``        "a little is enough" (Baruch et al., 2019): benign mean minus z times the benign coordinate-wise
                  standard deviation; z from the round's n and f (``attack_scale`` > 0 sets it).
  ``ipm``         inner product manipulation (Xie et al., 2020): minus ``attack_scale`` (default 0.1) times the
                  benign mean.
  ``minmax``      Shejwalkar and Houmansadr (2021): benign mean plus gamma times minus the benign standard
                  deviation, with the largest gamma whose distance to every benign update stays within the
                  largest distance between two benign updates (binary search).
Adaptive, against FedLNS (which sees only the normalization parameters):
  ``norm_mimicry``  train twice, on clean and on corrupted targets; send the clean run's normalization
                    parameters with everything else from the corrupted run.
  ``norm_freeze``   train on corrupted targets; send the global model's normalization parameters unchanged.
  ``decoy``         all train on corrupted targets; the round's first attacker also multiplies its
                    normalization change by ``attack_scale`` (0 = 10), to draw the mixture's second component.
  ``delta_budget``  train on corrupted targets; scale each normalization parameter's change down to the median
                    size of the benign clients' changes of that parameter in the round (omniscient).
Adaptive, against the support rule (``fedlns_default``; white-box: they know the rule and its settings, see the
round's benign updates, and ``ipm_search`` runs the server's own step; only the sketch's secret signs are hidden):
  ``norm_noise``    train on corrupted targets; send the global normalization parameters plus noise of the benign
                    changes' scale (per parameter, their root mean square) without the benign drift.
  ``band_mimic``    train on corrupted targets, then move the update towards the benign mean just enough to sit in
                    the benign band: cosine to the benign mean at least the lowest benign one, update norm within
                    the benign range, and the normalization change scaled to the benign median size.
  ``ipm_search``    optimiser-driven inner product manipulation: all attackers send ``-gamma`` times the benign
                    mean, with gamma picked each round from a fixed grid (0.1 to 16) to maximise the distance
                    between the server's actual aggregate (its own step, run on a copy of its state) and the
                    benign mean (the "optimal IPM" of ByzFL, written here as a grid search).
Adaptive, against the cohort rule (``fedlns_default`` since the support rule; white-box as above):
  ``majority_only``  train twice, on clean and on corrupted targets; send the corrupted model only in rounds where
                     the attackers are at least half of the round's clients, the clean one otherwise. The cohort
                     rule places ids only through rounds whose updates split: this attacker splits only where it
                     holds the round, so that the ids it gets placed are its own.
  ``sleeper``        train twice, on clean and on corrupted targets; send the clean model through the first half
                     of the run (``rounds // 2`` rounds), the corrupted one after: its ids build an honest history
                     before they poison.
  ``cut_blend``      train on corrupted targets; each attacker blends its update with a different benign
                     client's, with the least benign weight that makes the round's cut fail the cohort rule's
                     significance test (the attackers' cosines to the honest clients spread out).
  ``half_blend``     ``cut_blend`` leaning towards the mean of a random half of the benign updates instead of one.
  ``margin_blend``   ``cut_blend`` that stops at the least blend at which a cut that still splits the round cannot
                     reject the attackers' part under the server's ``cohort_margin`` (its vote above ``-margin``
                     times its size, the attackers counted in the minority, the honest in the majority): against
                     ``cohort_margin``, which keeps a part the history places half and half.
  ``weak_core``      train on corrupted targets; every attacker sends the attackers' mean update plus its own
                     noise (the benign coordinate-wise spread's shape), sized so that the attackers agree with each
                     other no more than the round's honest clients do (mean cosine), at the benign median norm:
                     against ``cohort_weight="coherence"``, where a cut's edges weigh its core's coherence.
  ``agree_blend``    ``weak_core`` leaned towards the honest clients' mean update, with the least honest weight at
                     which each attacker's median cosine to the honest clients is above the round's median pair
                     cosine: against ``cohort_weight="agreeing"``, where a weak cut joins two clients of one part
                     only when their own cosine is above that median.
  ``edgeless``       ``weak_core`` with its noise scale and a lean towards the honest clients' mean searched so that
                     the round, cut as the server cuts it, gives no agreeing edge at an attacker (no cut, or a weak
                     cut whose pairs at the attackers disagree with it): against ``cohort_vote="placed"``, where a
                     weak cut leaves the ids the history has not placed at 0, so attackers never placed are never
                     outvoted.
  ``majority_weak``  ``majority_only`` whose rounds are ``weak_core``'s: honest where the attackers are fewer than
                     half of the round, where they hold it the attackers agree no more than the honest clients:
                     against ``cohort_undecided="hold_contested"``, which holds only a round whose coherent part
                     agrees strongly.
  ``weak_sleeper``   ``sleeper`` whose poisoned half is ``weak_core``'s: clean models through the first half of the
                     run, so that the cohort graph places the attackers' ids with the honest clients, then the
                     attackers' mean corrupted update plus the least noise at which they agree no more than the
                     honest clients: against ``cohort_vote="settled"``, which reads a weak cut's sides from the
                     history once it holds a majority cohort.
  ``majority_drift`` ``majority_only`` that sends random directions (at its clean update's norm) where it does
                     not hold the round: against ``cohort_undecided="adaptive"``, whose test of whether updates agree
                     across rounds reads the bank, 40% of which is then noise.
  ``contest_flip``   ``agree_blend``, except where some attackers sending the honest clients' mean make the
                     honest clients and them the round's contested part (agreeing strongly, holding half of it) and
                     the other attackers, with their corrupted models, the rest: against
                     ``cohort_contested="reject"``, which rejects a contested part where the history cannot decide.
  ``minority_flip``  ``agree_blend``, except where some attackers sending the mean of the honest clients closest to
                     the honest mean make those clients and them a strong minority part of the round, the other
                     honest clients and the corrupted attackers the rest: against ``cohort_strong_minority="reject"``.
  ``victim_flip``    ``minority_flip`` with fixed roles (the same honest ids the victims, the same attacking ids the
                     covers), so that its cuts agree round after round: against ``cohort_balance``, which reads the
                     cohort graph only where its edges agree with its split.

To add one: subclass ``Attack``, declare and override what it changes, register it in ``ATTACKS``.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import torch

from .config import ATTACK_NAMES
from .data import IGNORE, Tokenizer, valid_target_ids


class Attack:
    """The interface; the base class is an honest client (nothing poisoned).

    Each round the run first tells the attack the round (``begin_round``); then every malicious client of the
    round, in this order:

    1. runs the local trainings declared in ``trainings``, each from the global weights on its own data:
       ``"poisoned"`` with ``apply`` rewriting every batch, ``"clean"`` without;
    2. keeps one result of them, ``local_result``;
    3. then, with the round's other attackers, sends what ``craft`` makes of every client's result (an attack
       that declares ``white_box`` also gets the server's step to search against).

    After the server's step, ``metrics`` measures the new global model. A new attack declares ``trainings`` (and
    ``white_box``) and overrides only the hooks it changes: the run does the training and calls the hooks, so an
    attack never trains by itself. ``norm_keys``, given to the hooks, are the parameters FedLNS's default
    selector puts in its signature: what an attacker who knows FedLNS targets.
    """

    name = "none"

    #: The local trainings a malicious client runs each round, in this order: ``"poisoned"`` (``apply`` on every
    #: batch) or ``"clean"`` (honest training, as a benign client's).
    trainings: tuple[str, ...] = ("poisoned",)

    #: True for a white-box attack: ``craft`` is then also given ``server``, the round's server step as a function
    #: ``server(client_params) -> new global params``, run on a copy of the server's state.
    white_box = False

    def __init__(self, tokenizer: Tokenizer, config=None):
        self.tokenizer = tokenizer
        self.config = config

    def apply(
        self, inputs: torch.Tensor, targets: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch of a malicious client -> poisoned (inputs, targets); must not modify its arguments."""
        return inputs, targets

    def begin_round(self, t: int) -> None:
        """Called once at the start of round t (from 1), before any training: an attack that acts by round keeps
        it here (the run may resume from a checkpoint, so the round is told, not counted)."""

    def local_result(self, trained: dict, global_params: dict, norm_keys) -> tuple[dict, float, float]:
        """What a malicious client keeps from its trainings: ``trained`` maps each of ``trainings`` to its
        (params, n examples, mean loss); returns one such triple. Default: the result of the one training."""
        (result,) = trained.values()
        return result

    def craft(
        self, global_params: dict, client_params: dict, malicious: list, norm_keys, rng: np.random.Generator
    ) -> dict:
        """Models the round's clients send, given what each trained (``malicious`` lists the round's attackers);
        returns new dicts for the attackers it changes, the others unchanged."""
        return client_params

    def metrics(self, model, eval_blocks: np.ndarray, task: str, device: str) -> dict:
        """Extra measurements of the global model after a round."""
        return {}


# ------------------------------------------------------------------------------------------ data poisoning


class TargetCorruption(Attack):
    """The paper's attack: inputs unchanged; each supervised target (``targets != IGNORE``; for MLM these are only
    the masked positions) is replaced with probability ``p_corr`` by a uniformly random valid token, never a
    padding, EOS or other special token."""

    name = "target_corruption"

    def __init__(self, tokenizer: Tokenizer, config=None, p_corr: float | None = None):
        super().__init__(tokenizer, config)
        self.p_corr = p_corr if p_corr is not None else (config.p_corr if config is not None else 1.0)
        self.candidates = valid_target_ids(tokenizer)  # (n_valid,)

    def apply(self, inputs, targets, generator):
        supervised = targets != IGNORE
        replace = supervised & (torch.rand(targets.shape, generator=generator) < self.p_corr)
        random_tokens = self.candidates[torch.randint(len(self.candidates), targets.shape, generator=generator)]
        return inputs, torch.where(replace, random_tokens, targets)


class Backdoor(Attack):
    """Trigger phrase -> target continuation, written into ``attack_fraction`` of the attackers' blocks."""

    name = "backdoor"

    def __init__(self, tokenizer: Tokenizer, config=None):
        super().__init__(tokenizer, config)
        self.trigger = torch.tensor(tokenizer.encode(" " + config.backdoor_trigger), dtype=torch.long)
        self.target = torch.tensor(tokenizer.encode(" " + config.backdoor_target), dtype=torch.long)
        self.fraction = config.attack_fraction
        self.mlm = config.family == "bert"
        if len(self.trigger) == 0 or len(self.target) == 0:
            raise ValueError("backdoor_trigger and backdoor_target must encode to at least one token each")

    def stamp(
        self, blocks: torch.Tensor, rows: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write trigger + target into ``rows`` of (B, L) ``blocks`` at random positions; returns the new blocks and
        a (B, L) mask of the target tokens' positions."""
        blocks = blocks.clone()
        span = len(self.trigger) + len(self.target)
        low = 1 if self.mlm else 0  # keep BERT's [CLS] and [SEP]
        high = blocks.shape[1] - span - (1 if self.mlm else 0)
        if high <= low:
            raise ValueError(f"blocks of {blocks.shape[1]} tokens cannot hold the trigger and target ({span} tokens)")
        where = torch.zeros_like(blocks, dtype=torch.bool)
        for row in rows.tolist():
            start = int(torch.randint(low, high + 1, (1,), generator=generator))
            blocks[row, start : start + len(self.trigger)] = self.trigger
            stop = start + span
            blocks[row, stop - len(self.target) : stop] = self.target
            where[row, stop - len(self.target) : stop] = True
        return blocks, where

    def apply(self, inputs, targets, generator):
        rows = torch.nonzero(torch.rand(len(inputs), generator=generator) < self.fraction).flatten()
        if not len(rows):
            return inputs, targets
        if self.mlm:  # the continuation is masked and must be predicted; the rest of the row keeps its masks
            stamped, where = self.stamp(inputs, rows, generator)
            stamped[where] = self.tokenizer.mask_id
            new_targets = targets.clone()
            new_targets[rows] = IGNORE
            new_targets[where] = self._target_grid(where)[where]
            return stamped, new_targets
        stamped, _ = self.stamp(inputs, rows, generator)
        new_targets = targets.clone()
        new_targets[rows, :-1] = stamped[rows, 1:]  # next-token targets of the rewritten rows
        return stamped, new_targets

    def _target_grid(self, where: torch.Tensor) -> torch.Tensor:
        grid = torch.full(where.shape, IGNORE, dtype=torch.long)
        for row in torch.nonzero(where.any(dim=1)).flatten().tolist():
            grid[row, where[row]] = self.target
        return grid

    @torch.no_grad()
    def metrics(self, model, eval_blocks, task, device):
        """Attack success rate: the share of target tokens predicted (argmax) after the trigger, on every
        evaluation block stamped once at a fixed position per block."""
        blocks = torch.from_numpy(eval_blocks)
        stamped, where = self.stamp(blocks, torch.arange(len(blocks)), torch.Generator().manual_seed(0))
        if self.mlm:
            inputs = stamped.clone()
            inputs[where] = self.tokenizer.mask_id
            predicted_at = where
        else:
            inputs = stamped
            predicted_at = torch.zeros_like(where)
            predicted_at[:, :-1] = where[:, 1:]  # position j predicts token j + 1
        model.eval()
        hits = total = 0
        for start in range(0, len(inputs), 64):
            logits = model(input_ids=inputs[start : start + 64].to(device)).logits.argmax(-1).cpu()
            truth = stamped[start : start + 64][where[start : start + 64]]
            guess = logits[predicted_at[start : start + 64]]
            hits += int((guess == truth).sum())
            total += int(truth.numel())
        return {"backdoor_asr": hits / max(total, 1)}


# ------------------------------------------------------------------------------------------ model poisoning


def _updates(global_params: dict, params: dict) -> dict:
    return {
        k: np.asarray(params[k], dtype=np.float64) - np.asarray(global_params[k], dtype=np.float64)
        for k in global_params
    }


def _model(global_params: dict, update: dict) -> dict:
    return {
        k: (np.asarray(global_params[k], dtype=np.float64) + update[k]).astype(global_params[k].dtype)
        for k in global_params
    }


def _flat(update: dict, keys) -> np.ndarray:
    return np.concatenate([update[k].ravel() for k in keys])


def _unflat(flat: np.ndarray, like: dict, keys) -> dict:
    out, start = {}, 0
    for k in keys:
        out[k] = flat[start : start + like[k].size].reshape(like[k].shape)
        start += like[k].size
    return out


def _stacked(global_params: dict, client_params: dict, ids, keys) -> np.ndarray:
    """The updates of ``ids``, flattened over ``keys``, one row each."""
    return np.stack([_flat(_updates(global_params, client_params[c]), keys) for c in ids])


def _tree_cut(rows: np.ndarray):
    """The server's cut of a round of flat updates (``fedlns_core._cohort.round_parts`` on their exact cosines, with
    ``FedLNS()``'s separation): the tree's, whatever the server's ``cohort_cut``."""
    from fedlns_core import FedLNS
    from fedlns_core._cohort import round_parts
    from fedlns_core._support import _unit

    units = _unit(rows)
    return round_parts(units @ units.T, separation=FedLNS().separation)


def _strong_core(rows: np.ndarray, core: np.ndarray) -> bool:
    """Whether the server's cut of a round of flat updates (:func:`_tree_cut`) is apart with exactly ``core`` (N,) bool
    as its coherent part, agreeing at least ``STRONG_CUT`` (mean cosine within)."""
    from fedlns_core._cohort import STRONG_CUT

    parts = _tree_cut(rows)
    return parts is not None and parts.apart and parts.within >= STRONG_CUT and np.array_equal(parts.first, core)


def _sending(global_params: dict, client_params: dict, ids, rows, keys) -> dict:
    """``client_params`` with the models of ``ids`` replaced by the global model plus their flat update rows."""
    return {**client_params, **{c: _model(global_params, _unflat(u, global_params, keys)) for c, u in zip(ids, rows)}}


class _Colluding(Attack):
    """Model poisoning: honest training, then every attacker of the round sends one crafted update computed from
    the benign clients' updates (``benign``: (n_benign, P)) or, in a round with no benign client, from the
    attackers' own."""

    trainings = ("clean",)

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        if not malicious:
            return client_params
        keys = sorted(global_params)
        updates = {c: _flat(_updates(global_params, p), keys) for c, p in client_params.items()}
        benign = [updates[c] for c in client_params if c not in malicious] or [updates[c] for c in malicious]
        crafted = self.crafted(
            np.stack(benign), [updates[c] for c in malicious], len(client_params), len(malicious), rng
        )
        out = dict(client_params)
        for client, flat in zip(malicious, crafted):
            out[client] = _model(global_params, _unflat(flat, global_params, keys))
        return out

    def crafted(self, benign: np.ndarray, own: list, n: int, f: int, rng) -> list[np.ndarray]:
        raise NotImplementedError


class SignFlip(_Colluding):
    name = "sign_flip"

    def crafted(self, benign, own, n, f, rng):
        scale = self.config.attack_scale if self.config.attack_scale > 0 else 1.0
        return [-scale * update for update in own]


class Scaling(_Colluding):
    name = "scaling"
    trainings = ("poisoned",)  # poisoned training, then boosted

    def crafted(self, benign, own, n, f, rng):
        scale = self.config.attack_scale if self.config.attack_scale > 0 else float(n)
        return [scale * update for update in own]


class Gaussian(_Colluding):
    name = "gaussian"

    def crafted(self, benign, own, n, f, rng):
        return [rng.normal(0.0, self.config.attack_noise, size=benign.shape[1]) for _ in own]


def alie_z(n: int, f: int) -> float:
    """z of "a little is enough": s = floor(n/2 + 1) - f supporters needed; z = Phi^-1((n - s) / n).

    Examples
    --------
    >>> round(alie_z(10, 4), 4)          # s = 6 - 4 = 2: Phi^-1(0.8)
    0.8416
    """
    supporters = math.floor(n / 2 + 1) - f
    return NormalDist().inv_cdf(min(max((n - supporters) / n, 1e-6), 1 - 1e-6))


class ALIE(_Colluding):
    name = "alie"

    def crafted(self, benign, own, n, f, rng):
        z = self.config.attack_scale if self.config.attack_scale > 0 else alie_z(n, f)
        update = benign.mean(axis=0) - z * benign.std(axis=0)
        return [update for _ in own]


class IPM(_Colluding):
    name = "ipm"

    def crafted(self, benign, own, n, f, rng):
        epsilon = self.config.attack_scale if self.config.attack_scale > 0 else 0.1
        return [-epsilon * benign.mean(axis=0) for _ in own]


def minmax_update(benign: np.ndarray, iterations: int = 40) -> np.ndarray:
    """Min-Max (Shejwalkar and Houmansadr, 2021) with the ``-std`` perturbation: ``mean - gamma * std`` with the
    largest gamma such that its largest distance to a benign update is at most the largest benign pairwise
    distance.

    Examples
    --------
    >>> benign = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> update = minmax_update(benign)
    >>> bound = max(np.linalg.norm(a - b) for a in benign for b in benign)
    >>> bool(max(np.linalg.norm(update - b) for b in benign) <= bound + 1e-9)
    True
    """
    mean, direction = benign.mean(axis=0), -benign.std(axis=0)
    bound = max(np.linalg.norm(a - b) for a in benign for b in benign) if len(benign) > 1 else 0.0
    if not np.any(direction) or bound == 0:
        return mean

    def fits(gamma):
        return max(np.linalg.norm(mean + gamma * direction - b) for b in benign) <= bound

    low, high = 0.0, 1.0
    while fits(high) and high < 1e6:
        low, high = high, 2 * high
    for _ in range(iterations):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return mean + low * direction


class MinMax(_Colluding):
    name = "minmax"

    def crafted(self, benign, own, n, f, rng):
        update = minmax_update(benign)
        return [update for _ in own]


# ------------------------------------------------------------------------------------------ adaptive


class NormMimicry(TargetCorruption):
    """Normalization parameters from a clean run, everything else from a corrupted one."""

    name = "norm_mimicry"
    trainings = ("clean", "poisoned")

    def local_result(self, trained, global_params, norm_keys):
        clean, _, _ = trained["clean"]
        poisoned, n_examples, loss = trained["poisoned"]
        return {k: clean[k] if k in norm_keys else poisoned[k] for k in poisoned}, n_examples, loss


class NormFreeze(TargetCorruption):
    """Corrupted training, the global normalization parameters sent back unchanged."""

    name = "norm_freeze"

    def local_result(self, trained, global_params, norm_keys):
        poisoned, n_examples, loss = trained["poisoned"]
        return (
            {k: np.array(global_params[k], copy=True) if k in norm_keys else v for k, v in poisoned.items()},
            n_examples,
            loss,
        )


class Decoy(TargetCorruption):
    """Corrupted training for all; the round's first attacker exaggerates its normalization change."""

    name = "decoy"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        if not malicious:
            return client_params
        scale = self.config.attack_scale if self.config.attack_scale > 0 else 10.0
        decoy = min(malicious)
        out = dict(client_params)
        params = client_params[decoy]
        out[decoy] = {
            k: (global_params[k] + scale * (params[k] - global_params[k])).astype(params[k].dtype)
            if k in norm_keys
            else params[k]
            for k in params
        }
        return out


class DeltaBudget(TargetCorruption):
    """Corrupted training; each normalization parameter's change shrunk to the benign clients' median size."""

    name = "delta_budget"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign:
            return client_params
        out = dict(client_params)
        budgets = _norm_budgets(global_params, client_params, benign, norm_keys)
        for client in malicious:
            params = dict(client_params[client])
            for key in norm_keys:
                change = params[key] - global_params[key]
                size = np.linalg.norm(change)
                if size > budgets[key]:
                    params[key] = (global_params[key] + change * (budgets[key] / size)).astype(params[key].dtype)
            out[client] = params
        return out


def _norm_budgets(global_params: dict, client_params: dict, benign: list, norm_keys) -> dict:
    """Per normalization parameter, the benign clients' median size (Frobenius norm) of its change this round."""
    return {
        key: float(np.median([np.linalg.norm(client_params[c][key] - global_params[key]) for c in benign]))
        for key in norm_keys
    }


def _most_harmful(options, server, global_params: dict, keys: list, benign_mean: np.ndarray) -> dict | None:
    """Of the candidate rounds ``options`` (what every client sends), the first whose aggregate by ``server`` (the
    server's own step on a copy of its state) lies furthest from the benign clients' mean update."""
    best, best_distance = None, -1.0
    for sent in options:
        distance = float(np.linalg.norm(_flat(_updates(global_params, server(sent)), keys) - benign_mean))
        if distance > best_distance:
            best, best_distance = sent, distance
    return best


class NormScaleSearch(TargetCorruption):
    """Corrupted training; the normalization change's size searched against the server's own step each round."""

    name = "norm_scale_search"
    white_box = True
    #: Each normalization parameter's change set to this many times the round's benign median size of that
    #: parameter's change (``None``: the attacker's own change, as trained).
    GRID = (None, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)

    def craft(self, global_params, client_params, malicious, norm_keys, rng, server=None):
        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign or server is None:
            return client_params
        keys = sorted(global_params)
        mean = np.mean([_flat(_updates(global_params, client_params[c]), keys) for c in benign], axis=0)
        budgets = _norm_budgets(global_params, client_params, benign, norm_keys)

        def sized(multiple):
            sent = dict(client_params)
            for client in malicious if multiple is not None else ():
                params = dict(client_params[client])
                for key in norm_keys:
                    change = np.asarray(params[key], dtype=np.float64) - global_params[key]
                    size = np.linalg.norm(change)
                    scale = multiple * budgets[key] / size if size > 0 else 0.0
                    params[key] = (global_params[key] + change * scale).astype(params[key].dtype)
                sent[client] = params
            return sent

        return _most_harmful(map(sized, self.GRID), server, global_params, keys, mean)


class NormNoise(TargetCorruption):
    """Corrupted training; normalization parameters sent as the global ones plus benign-scale noise."""

    name = "norm_noise"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign:
            return client_params
        out = dict(client_params)
        scale = {
            k: float(np.sqrt(np.mean([np.mean(np.square(client_params[c][k] - global_params[k])) for c in benign])))
            for k in norm_keys
        }
        for client in malicious:
            params = dict(client_params[client])
            for key in norm_keys:
                noise = rng.normal(0.0, scale[key], size=global_params[key].shape)
                params[key] = (global_params[key] + noise).astype(params[key].dtype)
            out[client] = params
        return out


def band_mimic_update(
    poisoned: np.ndarray, benign: np.ndarray, norm_mask: np.ndarray, iterations: int = 30
) -> np.ndarray:
    """The poisoned update moved towards the benign mean until it sits in the benign band (``band_mimic``).

    ``u(lam) = mean + lam (poisoned - mean)`` with the largest lam in [0, 1] whose cosine to the mean is at least
    the lowest benign cosine; then its norm is clamped into the benign range and its normalization part
    (``norm_mask``) scaled to the benign median size.

    Examples
    --------
    >>> benign = np.array([[1.0, 0.1, 0.0], [1.0, -0.1, 0.1], [0.9, 0.0, -0.1]])
    >>> u = band_mimic_update(np.array([-1.0, 0.0, 0.0]), benign, np.array([False, False, True]))
    >>> mean = benign.mean(axis=0)
    >>> cos = lambda a: a @ mean / np.linalg.norm(a) / np.linalg.norm(mean)
    >>> bool(cos(u) >= min(cos(b) for b in benign) - 1e-6)
    True
    """
    mean = benign.mean(axis=0)

    def cosine(update):
        return float(update @ mean / max(np.linalg.norm(update) * np.linalg.norm(mean), 1e-30))

    floor = min(cosine(b) for b in benign)
    low, high = 0.0, 1.0
    if cosine(poisoned) >= floor:
        low = 1.0
    else:
        for _ in range(iterations):
            middle = (low + high) / 2
            low, high = (middle, high) if cosine(mean + middle * (poisoned - mean)) >= floor else (low, middle)
    update = mean + low * (poisoned - mean)
    sizes = np.linalg.norm(benign, axis=1)
    size = np.linalg.norm(update)
    if size > 0:
        update = update * (np.clip(size, sizes.min(), sizes.max()) / size)
    if norm_mask.any():
        part = np.linalg.norm(update[norm_mask])
        target = float(np.median(np.linalg.norm(benign[:, norm_mask], axis=1)))
        if part > 0:
            update[norm_mask] *= target / part
    return update


class BandMimic(TargetCorruption):
    """Corrupted training, the update moved into the benign band of norm change, update norm and direction."""

    name = "band_mimic"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign:
            return client_params
        keys = sorted(global_params)
        mask = np.concatenate([np.full(global_params[k].size, k in norm_keys) for k in keys])
        stacked = _stacked(global_params, client_params, benign, keys)
        out = dict(client_params)
        for client in malicious:
            update = band_mimic_update(_flat(_updates(global_params, client_params[client]), keys), stacked, mask)
            out[client] = _model(global_params, _unflat(update, global_params, keys))
        return out


def _lora_factors(global_params: dict) -> list[tuple[str, str]]:
    """The (A, B) keys of the payload's LoRA modules (the pairs the LoRA signature reads)."""
    from fedlns_core._lora import lora_pairs

    return lora_pairs(global_params)


class LoraQuiet(TargetCorruption):
    """Corrupted training of the adapters; every LoRA factor's change shrunk to half the smallest benign change of
    that factor (``attack_scale`` sets the fraction): quieter than any honest client, the way ``norm_freeze`` is for
    the norm signature."""

    name = "lora_quiet"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign:
            return client_params
        fraction = self.config.attack_scale if self.config.attack_scale > 0 else 0.5
        targets = {
            key: fraction
            * min(np.linalg.norm(client_params[c][key].astype(np.float64) - global_params[key]) for c in benign)
            for pair in _lora_factors(global_params)
            for key in pair
        }
        out = dict(client_params)
        for client in malicious:
            params = dict(client_params[client])
            for key, target in targets.items():
                change = params[key].astype(np.float64) - global_params[key]
                size = np.linalg.norm(change)
                if size > 0:
                    params[key] = (global_params[key] + change * (target / size)).astype(params[key].dtype)
            out[client] = params
        return out


class LoraBand(TargetCorruption):
    """Corrupted training of the adapters; each column of ``dA`` and each row of ``dB`` rescaled to the benign
    clients' median norm of that column or row: the LoRA signature of the benign median, the poison's directions
    kept. White-box against the LoRA signature's statistic (its known weakness: it reads magnitudes)."""

    name = "lora_band"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign:
            return client_params
        out = {c: (dict(p) if c in malicious else p) for c, p in client_params.items()}
        for a, b in _lora_factors(global_params):
            for key, axis in ((a, 0), (b, 1)):  # A: (r, d_in), norms of columns; B: (d_out, r), of rows
                reference = np.asarray(global_params[key], dtype=np.float64)
                target = np.median(
                    [np.linalg.norm(client_params[c][key] - reference, axis=axis) for c in benign], axis=0
                )
                for client in malicious:
                    change = client_params[client][key] - reference
                    size = np.linalg.norm(change, axis=axis)
                    factor = np.divide(target, size, out=np.zeros_like(size), where=size > 0)
                    change = change * (factor[None, :] if axis == 0 else factor[:, None])
                    out[client][key] = (reference + change).astype(client_params[client][key].dtype)
        return out


class MajorityOnly(TargetCorruption):
    """Corrupted targets only where the round's attackers are at least half of it; honest elsewhere."""

    name = "majority_only"
    trainings = ("clean", "poisoned")

    def __init__(self, tokenizer, config=None):
        super().__init__(tokenizer, config)
        self._clean: list[dict] = []  # this round's clean models, in the order the attackers were trained

    def local_result(self, trained, global_params, norm_keys):
        self._clean.append(trained["clean"][0])
        return trained["poisoned"]

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        clean, self._clean = self._clean, []
        if 2 * len(malicious) >= len(client_params):
            return self.poison(global_params, client_params, malicious, norm_keys, rng)
        return self.honest(global_params, {**client_params, **dict(zip(malicious, clean))}, malicious, rng)

    def poison(self, global_params, client_params, malicious, norm_keys, rng):
        """What a round the attackers hold is sent: the corrupted models as trained."""
        return client_params

    def honest(self, global_params, client_params, malicious, rng):
        """What a round the attackers do not hold is sent (``client_params`` holds their clean models): those."""
        return client_params


class Sleeper(TargetCorruption):
    """Honest through the first half of the run, corrupted targets after: train twice, on clean and on corrupted
    targets, and send the clean model in rounds up to ``rounds // 2``, the corrupted one from the round after.
    White-box against a vote that reads the clients' history: by the time it poisons, its ids have sided with the
    honest clients in every round that split."""

    name = "sleeper"
    trainings = ("clean", "poisoned")

    def __init__(self, tokenizer, config=None, wake: int | None = None):
        super().__init__(tokenizer, config)
        self.wake = wake if wake is not None else (config.rounds // 2 + 1 if config is not None else 1)
        self.round = 0

    def begin_round(self, t):
        self.round = t

    def local_result(self, trained, global_params, norm_keys):
        return trained["poisoned" if self.round >= self.wake else "clean"]


class CutBlend(TargetCorruption):
    """Corrupted training; then attacker k sends ``(1 - lam) p_k + lam b_j``, its poisoned update blended with
    the update of a different benign client j of the round, with the smallest ``lam`` of ``GRID`` at which the
    cohort rule's cut of the round (``fedlns_core._cohort.round_parts`` with ``FedLNS()``'s separation and the
    server's ``cohort_cut``, on the updates' exact cosines) no longer counts. White-box against the cut's
    significance test: each attacker leaning towards another honest client spreads the attackers' cosines to the
    honest ones, which widens the spread the cut's gap is measured in, while the shared poison keeps most of its
    weight. Against ``cohort_cut="confirmed"`` the blend must also leave no group of attackers that
    ``fedlns_core._cohort.confirmed_cut`` would reject if the history already placed every attacker in the
    minority and every honest client in the majority (the attackers' worst case: they cannot read the server's
    graph); against ``"centered"``, also no cut of the updates centred at the round's median
    (``fedlns_core._cohort.centered_parts``). Where no ``lam`` below 1 hides the cut, the attackers send the
    largest one (the most honest-looking poison)."""

    name = "cut_blend"
    GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        from fedlns_core import FedLNS
        from fedlns_core._cohort import HISTORY_CUTS, centered_parts, confirmed_cut, round_parts
        from fedlns_core._support import _unit

        benign = [c for c in client_params if c not in malicious]
        if not malicious or not benign:
            return client_params
        keys = sorted(global_params)
        honest = _stacked(global_params, client_params, benign, keys)
        poisoned = _stacked(global_params, client_params, malicious, keys)
        defaults = FedLNS()
        separation = defaults.separation
        cut = defaults.cohort_cut if self.config is None else self.config.cohort_cut  # the server's setting
        sides = [1] * len(benign) + [-1] * len(malicious)  # for "confirmed": the history at its worst for them
        targets = self.blend_targets(honest, len(malicious), rng)
        for lam in self.GRID:
            crafted = [(1 - lam) * p + lam * target for p, target in zip(poisoned, targets)]
            rows = np.vstack([honest, np.stack(crafted)])
            units = _unit(rows)
            cosines = units @ units.T
            parts = round_parts(cosines, separation=separation, significant=cut == "significant")
            if cut == "centered" and (parts is None or not parts.apart):
                parts = centered_parts(rows, separation=separation)
            hidden = cut not in HISTORY_CUTS or confirmed_cut(cosines, sides) is None
            if ((parts is None or not parts.apart) and hidden) or self.kept_anyway(parts, len(benign)):
                break
        return _sending(global_params, client_params, malicious, crafted, keys)

    def kept_anyway(self, parts, n_benign: int) -> bool:
        """Whether a round the cut still splits keeps the attackers all the same (``cut_blend``: never)."""
        return False

    def blend_targets(self, honest: np.ndarray, n_attackers: int, rng) -> list[np.ndarray]:
        """What each attacker leans towards: the k-th benign update (cycling)."""
        return [honest[k % len(honest)] for k in range(n_attackers)]


class HalfBlend(CutBlend):
    """``cut_blend`` leaning towards the mean of a random half of the benign updates (a different half per
    attacker, rescaled to the benign updates' median norm) instead of one of them: no attacker is close to a
    single honest client, so it is white-box against any test that spots near-copies or reads a few pairs."""

    name = "half_blend"

    def blend_targets(self, honest, n_attackers, rng):
        size, scale = max(len(honest) // 2, 1), float(np.median(np.linalg.norm(honest, axis=1)))
        targets = []
        for _ in range(n_attackers):
            mean = honest[rng.permutation(len(honest))[:size]].mean(axis=0)
            targets.append(mean * scale / max(float(np.linalg.norm(mean)), 1e-300))
        return targets


class MarginBlend(CutBlend):
    """``cut_blend`` that stops as soon as the cut, where it still splits the round, cannot reject the attackers'
    part under the server's ``cohort_margin``: every attacker leans towards a different benign client, so the cut
    draws those clients into the attackers' part, and the part is rejected only where its vote (its members' sides
    summed) is at most ``-cohort_margin`` times its size. It counts the sides at its worst case (every attacker in
    the minority cohort, every honest client in the majority), so with no margin it needs a part that holds as many
    honest clients as attackers. White-box against ``FedLNS(cohort_margin=...)``: a part the margin keeps is
    reached with less honest weight than a cut that no longer counts."""

    name = "margin_blend"

    def kept_anyway(self, parts, n_benign):
        from fedlns_core._cohort import voted_out

        if parts is None or not parts.apart:
            return False
        margin = 0.0 if self.config is None else self.config.cohort_margin
        first = np.asarray(parts.first)
        members = [first, ~first]
        votes = [int(m[:n_benign].sum()) - int(m[n_benign:].sum()) for m in members]  # honest +1, attackers -1
        return voted_out(votes, [int(m.sum()) for m in members], margin) is None


class SideJoin(Sleeper):
    """A sleeper that frames honest clients first. White-box against the cohort graph (and so against the
    confirmed cut, which rejects a group the graph places in the minority even in a round not cut).

    Through the first half of the run, in every round whose honest updates are themselves cut apart (the false
    cuts of weakly agreeing honest updates: the rule's own ``round_parts`` on their exact cosines), each attacker
    sends the mean of the larger honest part plus half of its own clean update's deviation from the attackers'
    mean, so that the round is cut into the attackers with that part against the smaller one: the graph gains
    edges that tie the attackers to one honest side and push the other's ids towards the minority. Rounds whose
    honest updates are not cut get the clean models; from the round after ``rounds // 2`` it sends corrupted
    models, as ``sleeper``. It reads the tree's cut whatever the server's ``cohort_cut``, so that its runs do not
    depend on the setting."""

    name = "side_join"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if self.round >= self.wake or not malicious or len(benign) < 3:
            return client_params
        keys = sorted(global_params)
        honest = _stacked(global_params, client_params, benign, keys)
        parts = _tree_cut(honest)
        if parts is None or not parts.apart:
            return client_params
        larger = parts.first if 2 * int(parts.first.sum()) >= len(benign) else ~parts.first
        target = honest[larger].mean(axis=0)
        own = _stacked(global_params, client_params, malicious, keys)
        crafted = target + 0.5 * (own - own.mean(axis=0))
        return _sending(global_params, client_params, malicious, crafted, keys)


class WeakCore(TargetCorruption):
    """Corrupted training; then attacker k sends ``m + s e_k``, rescaled to the benign updates' median norm: ``m``
    the attackers' mean update, ``e_k`` its own noise (independent normal coordinates times the benign updates'
    coordinate-wise standard deviation, times ``|m| / |e_k|``), ``s`` the smallest scale (bisection) at which the
    attackers' mean pairwise cosine is at most the round's honest clients' own. White-box against
    ``FedLNS(cohort_weight="coherence")``: a cut's edges weigh its core's mean cosine within, so a group that agrees
    no more than honest clients do has edges no heavier than the false cuts among honest clients; the poison
    (``m``) is kept whole in direction, the noise averages out in the server's mean, and the norm stays under the
    median clip. Rounds with fewer than two attackers or two honest clients send the corrupted models."""

    name = "weak_core"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if len(malicious) < 2 or len(benign) < 2:
            return client_params
        keys = sorted(global_params)
        honest = _stacked(global_params, client_params, benign, keys)
        crafted = self.crafted(honest, _stacked(global_params, client_params, malicious, keys), rng)
        return _sending(global_params, client_params, malicious, self.lean(crafted, honest), keys)

    def crafted(self, honest: np.ndarray, poisoned: np.ndarray, rng) -> np.ndarray:
        """The attackers' rows before ``lean``: here ``weak``'s."""
        return self.weak(honest, poisoned, rng)

    @staticmethod
    def weak(honest: np.ndarray, poisoned: np.ndarray, rng) -> np.ndarray:
        """The attackers' mean poisoned update plus the least noise at which they agree no more than ``honest``."""
        mean, noise, scale = WeakCore.spread(honest, poisoned, rng)
        return mean + scale * noise

    @staticmethod
    def spread(honest: np.ndarray, poisoned: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray, float]:
        """``weak``'s parts: the attackers' mean poisoned update, their noise rows (each at the mean's norm), and the
        least scale of the noise at which they agree no more than ``honest`` (mean cosine)."""
        from fedlns_core._support import _unit

        target = _mean_cosine(_unit(honest))
        mean = poisoned.mean(axis=0)
        noise = rng.normal(size=poisoned.shape) * honest.std(axis=0)
        noise *= np.linalg.norm(mean) / np.maximum(np.linalg.norm(noise, axis=1, keepdims=True), 1e-300)
        low, high = 0.0, 1.0
        while _mean_cosine(_unit(mean + high * noise)) > target and high < 1e6:
            low, high = high, 2.0 * high
        for _ in range(40):
            middle = 0.5 * (low + high)
            low, high = (middle, high) if _mean_cosine(_unit(mean + middle * noise)) > target else (low, middle)
        return mean, noise, high

    def lean(self, crafted: np.ndarray, honest: np.ndarray) -> np.ndarray:
        """What is sent: the crafted rows at the benign median norm (``weak_core`` sends them as they are)."""
        norm = float(np.median(np.linalg.norm(honest, axis=1)))
        return crafted * (norm / np.maximum(np.linalg.norm(crafted, axis=1, keepdims=True), 1e-300))


class AgreeBlend(WeakCore):
    """``weak_core``, then every attacker's update leaned towards the honest clients' mean update: ``(1 - lam) c_k
    + lam h`` (both unit vectors), rescaled to the benign median norm, with the smallest ``lam`` of 0, 0.1, ...,
    0.9 at which each attacker's median cosine to the honest clients lies above the median cosine of all the
    round's pairs. White-box against ``FedLNS(cohort_weight="agreeing")``: a weak cut's +1 between an attacker and
    an honest client in the same part counts only where their cosine is above that median, so the attackers have
    to look like the honest clients to be joined with them; the price is the honest share ``lam`` of what they
    send."""

    name = "agree_blend"
    LEANS = tuple(k / 10 for k in range(10))

    def lean(self, crafted: np.ndarray, honest: np.ndarray) -> np.ndarray:
        from fedlns_core._cohort import pair_median
        from fedlns_core._support import _unit

        own, towards = _unit(crafted), _unit(honest.mean(axis=0)[None])[0]
        honest_units = _unit(honest)
        for lam in self.LEANS:
            sent = _unit((1.0 - lam) * own + lam * towards)
            units = np.concatenate([honest_units, sent])
            if np.all(np.median(sent @ honest_units.T, axis=1) > pair_median(units @ units.T)):
                break
        return super().lean(sent, honest)


class Edgeless(WeakCore):
    """``weak_core`` searched so that the cohort graph gains no edge at an attacker: each attacker sends
    ``(1 - lam) u_k + lam h`` (unit vectors; ``u_k`` the attackers' mean corrupted update plus ``s`` times its own
    noise, as ``weak_core``'s, ``h`` the honest clients' mean update) at the benign median norm, with ``s`` from
    ``weak_core``'s scale times ``SPREADS`` and ``lam`` from ``LEANS``. Of the settings at which the round, cut
    as the server cuts it (``fedlns_core._cohort.round_parts`` on the updates' exact cosines with ``FedLNS()``'s
    separation), is not apart or is cut weakly with no agreeing edge at an attacker
    (``fedlns_core._cohort.edge_strength``), it sends the one whose mean keeps the most of the poison's direction;
    where none does, the one with the fewest such edges. White-box against ``FedLNS(cohort_vote="placed")``: a weak
    cut is voted by the history alone and an id it has not placed votes 0, so attackers that the graph never
    places are never outvoted. Rounds with fewer than two attackers or two honest clients send the corrupted
    models."""

    name = "edgeless"
    SPREADS = (1.0, 1.5, 2.0, 3.0)
    LEANS = tuple(k / 10 for k in range(10))

    def crafted(self, honest, poisoned, rng):
        return self.search(honest, *self.spread(honest, poisoned, rng))

    @classmethod
    def search(cls, honest: np.ndarray, mean: np.ndarray, noise: np.ndarray, scale: float) -> np.ndarray:
        """The attackers' unit rows: the setting with no agreeing edge at an attacker (else the fewest) that keeps
        the most of ``mean``'s direction in their mean."""
        from fedlns_core import FedLNS
        from fedlns_core._cohort import STRONG_CUT, edge_strength, round_parts
        from fedlns_core._support import _unit

        separation = FedLNS().separation
        honest_units, towards, poison = _unit(honest), _unit(honest.mean(axis=0)[None])[0], _unit(mean[None])[0]
        attackers = slice(len(honest), None)
        best: tuple[tuple[int, float], np.ndarray] | None = None
        for spread in cls.SPREADS:
            own = _unit(mean + spread * scale * noise)
            for lam in cls.LEANS:
                sent = _unit((1.0 - lam) * own + lam * towards)
                units = np.concatenate([honest_units, sent])
                cosines = units @ units.T
                parts = round_parts(cosines, separation=separation)
                if parts is None or not parts.apart:
                    edges = 0
                elif parts.within >= STRONG_CUT:
                    edges = len(cosines) ** 2  # a strong cut votes with its own edges: never chosen over a weak one
                else:
                    edges = int(np.asarray(edge_strength(parts, "agreeing", cosines))[attackers].sum())
                kept = float(_unit(sent.mean(axis=0)[None])[0] @ poison)
                if best is None or (edges, -kept) < best[0]:
                    best = ((edges, -kept), sent)
        assert best is not None
        return best[1]


class MajorityWeak(MajorityOnly, WeakCore):
    """``majority_only`` whose rounds are crafted as ``weak_core``'s: honest where the attackers are fewer than half
    of the round; where they hold it, the attackers' mean corrupted update plus the least noise at which they agree
    no more than the round's honest clients. White-box against ``FedLNS(cohort_undecided="hold_contested")``, which
    holds a round the history cannot decide when its coherent part agrees at least ``STRONG_CUT`` and holds half
    of it: a core that agrees weakly is not contested, so the round goes to the support rule."""

    name = "majority_weak"

    def poison(self, global_params, client_params, malicious, norm_keys, rng):
        return WeakCore.craft(self, global_params, client_params, malicious, norm_keys, rng)


class WeakSleeper(Sleeper, WeakCore):
    """``sleeper`` whose corrupted rounds are crafted as ``weak_core``'s: the clean models through the first half of
    the run, then the attackers' mean corrupted update plus the least noise at which they agree no more than the
    round's honest clients. White-box against ``FedLNS(cohort_vote="settled")`` (and ``"placed"``, ``"strong"``,
    ``"history"``): once the history holds a majority cohort, a weak cut's parts vote with the sides the graph
    before the round gives their ids, and an honest first half has put the attackers' ids on the honest clients'
    side; the noise keeps their cut weak, so it is never voted by its own edges. The history decays (``cohort_decay``
    per round), so the cover lasts as long as the rounds' own edges take to move the attackers' ids."""

    name = "weak_sleeper"

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        if self.round < self.wake:
            return client_params
        return WeakCore.craft(self, global_params, client_params, malicious, norm_keys, rng)


class MajorityDrift(MajorityOnly):
    """``majority_only`` whose other rounds send noise: where the attackers are fewer than half of the round, each
    sends its clean update's norm in a fresh random direction (independent normal coordinates times the benign
    updates' coordinate-wise standard deviation); where they hold it, the corrupted models. White-box against
    ``FedLNS(cohort_undecided="adaptive")``, whose test of whether the history's updates agree across rounds is
    the median cosine of recent bank entries of different rounds: the attackers' entries (40% of the bank) agree
    with nothing, so that test can read "drifting" where honest updates agree (a model trained from scratch), and
    the rounds the attackers hold are then held instead of going to the support rule, which would reject them
    there. Rounds with fewer than two benign clients send the clean models."""

    name = "majority_drift"

    def honest(self, global_params, client_params, malicious, rng):
        benign = [c for c in client_params if c not in malicious]
        if len(benign) < 2 or not malicious:
            return client_params
        keys = sorted(global_params)
        own = _stacked(global_params, client_params, malicious, keys)
        noise = rng.normal(size=own.shape) * _stacked(global_params, client_params, benign, keys).std(axis=0)
        noise *= np.linalg.norm(own, axis=1, keepdims=True) / np.maximum(
            np.linalg.norm(noise, axis=1, keepdims=True), 1e-300
        )
        return _sending(global_params, client_params, malicious, noise, keys)


class ContestFlip(AgreeBlend):
    """``agree_blend``, except in a round where the attackers can make the honest clients the round's contested
    part: there the fewest attackers that do it (the cover) send the honest clients' mean update at the benign
    median norm, and the others their corrupted models as trained. The server's cut (``fedlns_core._cohort.
    round_parts`` with ``FedLNS()``'s separation, on the updates' exact cosines) then has the honest clients and the
    cover as its core, agreeing at least ``STRONG_CUT`` and holding at least half of the round
    (``fedlns_core._cohort.contested``), and the corrupted attackers alone in the other part. White-box against
    ``FedLNS(cohort_contested="reject")``, which rejects a contested core in a round no cohort of the history
    decides: it keeps the corrupted attackers only (``"hold"`` holds the round). The cover costs the attackers what
    it sends (the honest mean); rounds where no cover does it are ``agree_blend``'s, whose rounds are rarely cut, so
    that the history stays without a majority cohort."""

    name = "contest_flip"
    least_benign = 2  # fewer benign clients in the round: agree_blend's

    def craft(self, global_params, client_params, malicious, norm_keys, rng):
        benign = [c for c in client_params if c not in malicious]
        if len(malicious) < 2 or len(benign) < self.least_benign:
            return AgreeBlend.craft(self, global_params, client_params, malicious, norm_keys, rng)
        keys = sorted(global_params)
        attackers = self.order(malicious)
        honest = _stacked(global_params, client_params, benign, keys)
        sent = self.flipped(honest, _stacked(global_params, client_params, attackers, keys), rng, benign, attackers)
        if sent is None:
            return AgreeBlend.craft(self, global_params, client_params, malicious, norm_keys, rng)
        return _sending(global_params, client_params, attackers[: len(sent)], sent, keys)

    def order(self, malicious) -> list:
        """The attackers in the order of the rows they send (``poisoned``'s): here the round's."""
        return list(malicious)

    def flipped(self, honest: np.ndarray, poisoned: np.ndarray, rng, benign, attackers) -> np.ndarray | None:
        """The rows the first attackers (of ``order``) send, the others sending what they trained, or None for
        ``agree_blend``'s round; ``benign`` and ``attackers`` are the ids of ``honest``'s and ``poisoned``'s rows.
        Here the cover."""
        covers = self.flip(honest, poisoned)
        return None if covers is None else self.cover(honest, covers)

    @staticmethod
    def cover(honest: np.ndarray, count: int) -> np.ndarray:
        """``count`` rows of the honest clients' mean update at their median norm."""
        mean = honest.mean(axis=0)
        norm = float(np.median(np.linalg.norm(honest, axis=1)))
        return np.repeat((mean * norm / max(float(np.linalg.norm(mean)), 1e-300))[None], count, axis=0)

    @classmethod
    def flip(cls, honest: np.ndarray, poisoned: np.ndarray) -> int | None:
        """The fewest cover rows (the first attackers') with which the round's cut is contested with the honest
        clients and the cover as its core and every other attacker outside it; None where no count below the
        attackers' does."""
        from fedlns_core._cohort import contested

        n_honest = len(honest)
        for count in range(1, len(poisoned)):
            rows = np.vstack([honest, cls.cover(honest, count), poisoned[count:]])
            parts = _tree_cut(rows)
            if parts is None or not parts.apart or not contested(parts, len(rows)):
                continue
            if parts.first[: n_honest + count].all() and not parts.first[n_honest + count :].any():
                return count
        return None


class MinorityFlip(ContestFlip):
    """``agree_blend``, except in a round where the attackers can make a few honest clients a strong minority part:
    there the fewest attackers that do it (the cover) send the mean update of the honest clients closest to the
    honest mean (as many as it takes, the most of them first) at those clients' median norm, and the others
    ``weak_core``'s rows (their mean corrupted update plus the least noise at which they agree no more than the honest
    clients, at the benign median norm), so that they form no core of their own. The server's cut
    (``fedlns_core._cohort.round_parts`` with ``FedLNS()``'s separation, on the updates' exact cosines) then has
    those honest clients and the cover as its core, agreeing at
    least ``STRONG_CUT`` and holding less than half of the round, with the other honest clients and the corrupted
    attackers as the rest. White-box against ``FedLNS(cohort_strong_minority="reject")``, which rejects such a core
    in a round no cohort of the history decides: it rejects honest clients and keeps the corrupted attackers among
    the others. Rounds where no cover does it are ``agree_blend``'s."""

    name = "minority_flip"
    least_benign = 3

    def flipped(self, honest, poisoned, rng, benign, attackers):
        """Every attacker's row: the cover and ``weak_core``'s rows, or where no cover does it ``agree_blend``'s
        rows from the same draws."""
        crafted = self.weak(honest, poisoned, rng)
        weak = WeakCore.lean(self, crafted, honest)
        found = self.minority(honest, weak)
        if found is None:
            return self.lean(crafted, honest)
        chosen, covers = found
        return np.vstack([self.cover(honest[chosen], covers), weak[covers:]])

    @staticmethod
    def minority(honest: np.ndarray, poisoned: np.ndarray) -> tuple[np.ndarray, int] | None:
        """(the honest clients chosen, the cover count): the fewest cover rows (in place of the first of
        ``poisoned``), and with them the most honest clients closest to the honest mean, with which the round's cut
        has those clients and the cover as a strong core of less than half of the round and every other client
        outside it; None where none does."""
        from fedlns_core._support import _unit

        units = _unit(honest)
        order = np.argsort(-(units @ _unit(honest.mean(axis=0)[None])[0]), kind="stable")
        n = len(honest) + len(poisoned)
        for count in range(1, len(poisoned)):
            for size in range(len(honest) - 1, 1, -1):
                if 2 * (size + count) >= n:
                    continue  # contested, not a minority
                chosen = np.sort(order[:size])
                expected = np.zeros(n, dtype=bool)
                expected[chosen] = True
                expected[len(honest) : len(honest) + count] = True
                if _strong_core(
                    np.vstack([honest, ContestFlip.cover(honest[chosen], count), poisoned[count:]]), expected
                ):
                    return chosen, count
        return None


class VictimFlip(MinorityFlip):
    """``minority_flip`` with its roles fixed across rounds, so that its cuts agree with one another: the honest ids
    divisible by 3 are the victims, the attacking ids divisible by 2 the covers. In a round with victims and covers,
    every cover sends the victims' mean update at their median norm and the other attackers ``weak_core``'s rows,
    where the server's cut (``fedlns_core._cohort.round_parts`` with ``FedLNS()``'s separation, on the updates' exact
    cosines) then has the victims and the covers, and only them, as a core agreeing at least ``STRONG_CUT``; other
    rounds are ``agree_blend``'s. Every such cut sets the same ids against the same ids, so the cohort graph they
    build is balanced (each edge agrees with its split), with the other honest clients and the attackers that send
    the poison on one side, more than half of all ids, and the victims with the covers on the other. White-box
    against ``FedLNS(cohort_balance=...)``, which reads the graph's split only where it is balanced: the vote then
    rejects the victims and keeps the poison."""

    name = "victim_flip"

    @staticmethod
    def victim(client) -> bool:
        return int(client) % 3 == 0

    @staticmethod
    def covering(client) -> bool:
        return int(client) % 2 == 0

    def order(self, malicious) -> list:
        """The covers first."""
        return sorted(malicious, key=lambda c: not self.covering(c))

    def flipped(self, honest, poisoned, rng, benign, attackers):
        """Every attacker's row: the victims' cover and ``weak_core``'s rows where the cut is as planned, else
        ``agree_blend``'s rows from the same draws."""
        crafted = self.weak(honest, poisoned, rng)
        covers = sum(1 for c in attackers if self.covering(c))
        victims = np.array([self.victim(c) for c in benign])
        if victims.any() and 0 < covers < len(attackers):
            rows = np.vstack([self.cover(honest[victims], covers), WeakCore.lean(self, crafted, honest)[covers:]])
            if _strong_core(np.vstack([honest, rows]), np.concatenate([victims, np.arange(len(attackers)) < covers])):
                return rows
        return self.lean(crafted, honest)


def _mean_cosine(units: np.ndarray) -> float:
    """Mean cosine between distinct rows of unit vectors."""
    n = len(units)
    total = float(np.square(units.sum(axis=0)).sum()) - n  # sum over ordered pairs i != j of u_i . u_j
    return total / (n * (n - 1))


class IPMSearch(_Colluding):
    """Inner product manipulation with the scale searched against the server's own step each round."""

    name = "ipm_search"
    white_box = True
    GRID = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)

    def craft(self, global_params, client_params, malicious, norm_keys, rng, server=None):
        if not malicious or server is None or len(malicious) == len(client_params):
            return super().craft(global_params, client_params, malicious, norm_keys, rng)
        keys = sorted(global_params)
        benign = np.stack(
            [_flat(_updates(global_params, p), keys) for c, p in client_params.items() if c not in malicious]
        )
        mean = benign.mean(axis=0)

        def scaled(gamma):
            crafted = _model(global_params, _unflat(-gamma * mean, global_params, keys))
            return {c: (crafted if c in malicious else p) for c, p in client_params.items()}

        return _most_harmful(map(scaled, self.GRID), server, global_params, keys, mean)

    def crafted(self, benign, own, n, f, rng):  # no server to search against: plain IPM
        return [-0.1 * benign.mean(axis=0) for _ in own]


ATTACKS = {
    cls.name: cls
    for cls in (
        TargetCorruption,
        Backdoor,
        SignFlip,
        Scaling,
        Gaussian,
        ALIE,
        IPM,
        MinMax,
        NormMimicry,
        NormFreeze,
        Decoy,
        DeltaBudget,
        NormScaleSearch,
        NormNoise,
        BandMimic,
        IPMSearch,
        LoraQuiet,
        LoraBand,
        MajorityOnly,
        Sleeper,
        CutBlend,
        HalfBlend,
        MarginBlend,
        SideJoin,
        WeakCore,
        AgreeBlend,
        Edgeless,
        MajorityWeak,
        WeakSleeper,
        MajorityDrift,
        ContestFlip,
        MinorityFlip,
        VictimFlip,
    )
}
assert tuple(ATTACKS) == ATTACK_NAMES, "config.ATTACK_NAMES and the attack classes must list the same names"


def make_attack(name: str, tokenizer: Tokenizer, config=None) -> Attack:
    """Build a registered attack by name, with its parameters from ``config``."""
    if name not in ATTACKS:
        raise KeyError(f"unknown attack {name!r}; registered: {sorted(ATTACKS)}")
    return ATTACKS[name](tokenizer, config)
