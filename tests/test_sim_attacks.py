"""The attacks of fedlns_sim on small tensors (each changes what it claims and nothing else, deterministically per
seed), BERT masking, and every attack end to end in the smoke preset."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from fedlns_sim.attacks import ATTACKS, Attack, TargetCorruption, alie_z, make_attack, minmax_update  # noqa: E402
from fedlns_sim.config import ATTACK_NAMES, LORA_ATTACKS, Config, make_config  # noqa: E402
from fedlns_sim.data import IGNORE, Tokenizer, causal_targets, mask_for_mlm  # noqa: E402

SPECIAL = (0, 1, 2, 3, 4)       # e.g. [PAD], [UNK], [CLS], [SEP], [MASK]
TOKENIZER = Tokenizer(encode=None, vocab_size=40, special_ids=SPECIAL, eos_id=1, cls_id=2, sep_id=3, mask_id=4)


def _blocks(seed=0, shape=(16, 32)):
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randint(5, 40, shape, generator=generator)
    blocks[:, 0], blocks[:, -1] = 2, 3
    blocks[:, 10] = 1   # an EOS inside the stream is a genuine target of the previous position
    return blocks


def test_causal_attack_changes_only_targets_and_never_to_special_tokens():
    blocks = _blocks()
    inputs, targets = blocks, causal_targets(blocks)
    before_inputs, before_targets = inputs.clone(), targets.clone()
    new_inputs, new_targets = TargetCorruption(TOKENIZER, p_corr=1.0).apply(inputs, targets,
                                                                           torch.Generator().manual_seed(1))
    assert torch.equal(new_inputs, before_inputs) and torch.equal(inputs, before_inputs)
    assert torch.equal(targets, before_targets)                      # arguments not modified
    supervised = before_targets != IGNORE
    assert torch.equal(new_targets[~supervised], before_targets[~supervised])
    assert not torch.isin(new_targets[supervised], torch.tensor(SPECIAL)).any()
    assert (new_targets[supervised] != before_targets[supervised]).float().mean() > 0.9   # 1/35 can repeat


def test_mlm_attack_touches_only_masked_positions():
    blocks = _blocks(shape=(32, 32))
    inputs, targets = mask_for_mlm(blocks, TOKENIZER, 0.15, torch.Generator().manual_seed(0))
    masked = targets != IGNORE
    assert 0 < masked.sum() < masked.numel()
    assert not masked[:, 0].any() and not masked[:, -1].any()         # [CLS]/[SEP] are never picked
    _, corrupted = make_attack("target_corruption", TOKENIZER).apply(inputs, targets, torch.Generator().manual_seed(2))
    assert torch.equal(corrupted[~masked], targets[~masked])          # still IGNORE everywhere else
    assert (corrupted[masked] != targets[masked]).any()
    assert not torch.isin(corrupted[masked], torch.tensor(SPECIAL)).any()


def test_mlm_masking_rates_and_kept_inputs():
    blocks = _blocks(shape=(200, 64))
    inputs, targets = mask_for_mlm(blocks, TOKENIZER, 0.15, torch.Generator().manual_seed(0))
    masked = targets != IGNORE
    eligible = ~torch.isin(blocks, torch.tensor(SPECIAL))
    assert abs(masked.sum() / eligible.sum() - 0.15) < 0.01
    assert abs((inputs[masked] == 4).float().mean() - 0.8) < 0.03
    assert torch.equal(inputs[~masked], blocks[~masked])
    assert torch.equal(targets[masked], blocks[masked])


@pytest.mark.parametrize("p_corr,low,high", [(0.0, 0.0, 0.0), (0.5, 0.4, 0.6)])
def test_corruption_probability(p_corr, low, high):
    blocks = _blocks(shape=(64, 64))
    targets = causal_targets(blocks)
    _, new = TargetCorruption(TOKENIZER, p_corr=p_corr).apply(blocks, targets, torch.Generator().manual_seed(3))
    supervised = targets != IGNORE
    changed = (new[supervised] != targets[supervised]).float().mean()
    assert low <= float(changed) <= high


def test_attack_is_deterministic_in_its_generator_and_registry_rejects_unknown_names():
    blocks = _blocks()
    targets = causal_targets(blocks)
    attack = TargetCorruption(TOKENIZER)
    a = attack.apply(blocks, targets, torch.Generator().manual_seed(5))[1]
    b = attack.apply(blocks, targets, torch.Generator().manual_seed(5))[1]
    assert torch.equal(a, b)
    with pytest.raises(KeyError, match="unknown attack 'label_flip'"):
        make_attack("label_flip", TOKENIZER)
    inputs, same = Attack(TOKENIZER).apply(blocks, targets, torch.Generator())   # the base class is honest
    assert inputs is blocks and same is targets


# ------------------------------------------------------------------------------------------ the suite

NORMS = frozenset({"ln.weight"})


def _config(**overrides):
    return SimpleNamespace(**{**Config().to_dict(), **overrides})


def _round(n_benign=6, n_malicious=4, seed=0):
    """Global params and a round of returned models: benign updates around +0.01, attackers' own around -0.02."""
    rng = np.random.default_rng(seed)
    global_params = {"ln.weight": np.ones(8, dtype=np.float32), "w": np.zeros((4, 4), dtype=np.float32)}
    clients = {}
    for client in range(n_benign + n_malicious):
        shift = 0.01 if client < n_benign else -0.02
        clients[client] = {k: (v + shift + 0.001 * rng.standard_normal(v.shape)).astype(np.float32)
                           for k, v in global_params.items()}
    return global_params, clients, list(range(n_benign, n_benign + n_malicious))


def _update(global_params, params):
    return np.concatenate([(params[k].astype(np.float64) - global_params[k]).ravel() for k in sorted(global_params)])


def test_the_registry_and_the_config_list_the_same_attacks():
    assert tuple(ATTACKS) == ATTACK_NAMES
    with pytest.raises(ValueError, match="attack must be one of"):
        make_config("smoke", "gpt", attack="label_flip")


def test_every_attack_declares_its_trainings_by_the_two_known_kinds():
    for attack in ATTACKS.values():
        assert attack.trainings and set(attack.trainings) <= {"clean", "poisoned"}, attack.name
        assert len(set(attack.trainings)) == len(attack.trainings), attack.name
    assert ATTACKS["sign_flip"].trainings == ("clean",) and ATTACKS["target_corruption"].trainings == ("poisoned",)


@pytest.mark.parametrize("name", ["sign_flip", "scaling", "gaussian", "alie", "ipm", "minmax"])
def test_model_poisoning_changes_only_the_attackers_and_is_deterministic(name):
    global_params, clients, malicious = _round()
    attack = make_attack(name, TOKENIZER, _config(clients_per_round=10))
    first = attack.craft(global_params, clients, malicious, NORMS, np.random.default_rng(1))
    again = attack.craft(global_params, clients, malicious, NORMS, np.random.default_rng(1))
    for client in clients:
        for key in global_params:
            assert np.array_equal(first[client][key], again[client][key])
            assert first[client][key].dtype == global_params[key].dtype and first[client][key].shape == clients[client][key].shape
            if client not in malicious:
                assert first[client][key] is clients[client][key]              # benign clients untouched
    changed = [not np.allclose(_update(global_params, first[c]), _update(global_params, clients[c])) for c in malicious]
    assert all(changed)


def test_model_poisoning_formulas_by_hand():
    global_params, clients, malicious = _round()
    benign = np.stack([_update(global_params, clients[c]) for c in clients if c not in malicious])
    config = _config(clients_per_round=10)
    rng = np.random.default_rng(0)
    sent = lambda name: _update(global_params, make_attack(name, TOKENIZER, config).craft(  # noqa: E731
        global_params, clients, malicious, NORMS, rng)[malicious[0]])
    own = _update(global_params, clients[malicious[0]])
    assert np.allclose(sent("sign_flip"), -own, atol=1e-6)
    assert np.allclose(sent("ipm"), -0.1 * benign.mean(0), atol=1e-6)
    assert np.allclose(sent("alie"), benign.mean(0) - alie_z(10, 4) * benign.std(0), atol=1e-6)
    gaussian = sent("gaussian")
    assert abs(gaussian.std() - 0.01) < 0.004 and abs(gaussian.mean()) < 0.005
    # Min-Max: as far along -std as the largest benign pairwise distance allows, and no further
    crafted = minmax_update(benign)
    bound = max(np.linalg.norm(a - b) for a in benign for b in benign)
    assert max(np.linalg.norm(crafted - b) for b in benign) == pytest.approx(bound, rel=1e-6)
    assert alie_z(10, 4) == pytest.approx(0.8416, abs=1e-4)    # s = 6 - 4 = 2, Phi^-1(0.8)


def test_scaling_trains_on_poisoned_data_then_boosts():
    global_params, clients, malicious = _round()
    attack = make_attack("scaling", TOKENIZER, _config(clients_per_round=10))
    assert attack.trainings == ("poisoned",)
    sent = attack.craft(global_params, clients, malicious, NORMS, np.random.default_rng(0))
    assert np.allclose(_update(global_params, sent[malicious[0]]), 10 * _update(global_params, clients[malicious[0]]),
                       atol=1e-5)


def test_adaptive_attacks_shape_exactly_the_normalization_change():
    global_params, clients, malicious = _round()
    config = _config(clients_per_round=10)
    clean = {k: v + 0.5 for k, v in global_params.items()}
    poisoned = {k: v - 0.5 for k, v in global_params.items()}
    trained = {"clean": (clean, 7.0, 2.0), "poisoned": (poisoned, 8.0, 1.0)}
    mimicry = make_attack("norm_mimicry", TOKENIZER, config)
    assert mimicry.trainings == ("clean", "poisoned")
    spliced, n, _ = mimicry.local_result(trained, global_params, NORMS)
    assert np.array_equal(spliced["ln.weight"], clean["ln.weight"]) and np.array_equal(spliced["w"], poisoned["w"])
    assert n == 8.0
    freeze = make_attack("norm_freeze", TOKENIZER, config)
    frozen, _, _ = freeze.local_result({"poisoned": trained["poisoned"]}, global_params, NORMS)
    assert np.array_equal(frozen["ln.weight"], global_params["ln.weight"]) and np.array_equal(frozen["w"], poisoned["w"])
    sent = make_attack("decoy", TOKENIZER, config).craft(global_params, clients, malicious, NORMS, None)
    decoy, other = min(malicious), malicious[1]
    assert np.allclose(sent[decoy]["ln.weight"] - 1, 10 * (clients[decoy]["ln.weight"] - 1), atol=1e-5)
    assert sent[decoy]["w"] is clients[decoy]["w"] and sent[other] is clients[other]
    sent = make_attack("delta_budget", TOKENIZER, config).craft(global_params, clients, malicious, NORMS, None)
    budget = np.median([np.linalg.norm(clients[c]["ln.weight"] - 1) for c in clients if c not in malicious])
    for client in malicious:
        change = sent[client]["ln.weight"] - 1.0
        assert np.linalg.norm(change) == pytest.approx(budget, rel=1e-5)          # shrunk to the benign median
        assert np.allclose(change / np.linalg.norm(change), (clients[client]["ln.weight"] - 1)
                           / np.linalg.norm(clients[client]["ln.weight"] - 1), atol=1e-5)   # same direction
        assert sent[client]["w"] is clients[client]["w"]


def test_attacks_against_the_support_rule():
    global_params, clients, malicious = _round()
    config = _config(clients_per_round=10)
    benign = [c for c in clients if c not in malicious]
    # norm_noise: global norms plus noise of the benign changes' root-mean-square scale, the rest untouched
    sent = make_attack("norm_noise", TOKENIZER, config).craft(global_params, clients, malicious, NORMS,
                                                              np.random.default_rng(0))
    scale = np.sqrt(np.mean([np.mean((clients[c]["ln.weight"] - 1.0) ** 2) for c in benign]))
    noise = np.concatenate([sent[c]["ln.weight"] - 1.0 for c in malicious])
    assert noise.std() == pytest.approx(scale, rel=0.5) and sent[malicious[0]]["w"] is clients[malicious[0]]["w"]
    # band_mimic: inside the benign band of direction and norm, normalization change at the benign median size
    sent = make_attack("band_mimic", TOKENIZER, config).craft(global_params, clients, malicious, NORMS, None)
    stacked = np.stack([_update(global_params, clients[c]) for c in benign])
    mean, sizes = stacked.mean(0), np.linalg.norm(stacked, axis=1)
    cosine = lambda u: u @ mean / np.linalg.norm(u) / np.linalg.norm(mean)  # noqa: E731
    for client in malicious:
        update = _update(global_params, sent[client])
        assert cosine(update) >= min(cosine(b) for b in stacked) - 0.05
        assert sizes.min() * 0.9 <= np.linalg.norm(update) <= sizes.max() * 1.1
        assert np.linalg.norm(sent[client]["ln.weight"] - 1.0) == pytest.approx(
            np.median([np.linalg.norm(clients[c]["ln.weight"] - 1.0) for c in benign]), rel=1e-4)
    # ipm_search: the scale the server's step rewards most; without a server, plain IPM
    attack = make_attack("ipm_search", TOKENIZER, config)
    plain = attack.craft(global_params, clients, malicious, NORMS, None)
    assert np.allclose(_update(global_params, plain[malicious[0]]), -0.1 * mean, atol=1e-6)
    assert {name for name in ATTACKS if ATTACKS[name].white_box} == {"ipm_search", "norm_scale_search"}
    fedavg = lambda sent: {k: np.mean([p[k] for p in sent.values()], axis=0) for k in global_params}  # noqa: E731
    searched = attack.craft(global_params, clients, malicious, NORMS, None, server=fedavg)
    assert np.allclose(_update(global_params, searched[malicious[0]]), -16 * mean, rtol=1e-4, atol=1e-4)


def test_norm_scale_search_sizes_the_normalization_change_the_server_keeps_and_is_hurt_most_by():
    """Against a server that averages the clients whose normalization change is within 0.5-1.5 times the benign
    median: the attackers' own change (twice it) is rejected; of the sizes kept, the largest (1.25 times) moves
    the average furthest from the benign mean. Only the normalization parameters change."""
    global_params, clients, malicious = _round()
    benign = [c for c in clients if c not in malicious]
    budget = np.median([np.linalg.norm(clients[c]["ln.weight"] - 1.0) for c in benign])

    def server(sent):
        kept = [p for p in sent.values() if 0.5 * budget <= np.linalg.norm(p["ln.weight"] - 1.0) <= 1.5 * budget]
        return {k: np.mean([p[k] for p in kept], axis=0) for k in global_params}

    attack = make_attack("norm_scale_search", TOKENIZER, _config())
    assert attack.craft(global_params, clients, malicious, NORMS, None) is clients  # no server: as trained
    sent = attack.craft(global_params, clients, malicious, NORMS, None, server=server)
    for client in malicious:
        change = sent[client]["ln.weight"] - 1.0
        assert np.linalg.norm(change) == pytest.approx(1.25 * budget, rel=1e-5)
        assert sent[client]["w"] is clients[client]["w"]
    assert all(sent[c] is clients[c] for c in benign)


def test_majority_only_poisons_only_the_rounds_its_attackers_hold():
    global_params = {"w": np.zeros(3)}
    attack = make_attack("majority_only", TOKENIZER, _config())
    assert attack.trainings == ("clean", "poisoned")
    clean = {c: {"w": np.full(3, -1.0 - c)} for c in range(4)}
    poisoned = {c: {"w": np.full(3, 1.0 + c)} for c in range(4)}
    for held, malicious in ((False, [0]), (True, [0, 1]), (True, [0, 1, 2])):
        kept = {c: attack.local_result({"clean": (clean[c], 5, 0.1), "poisoned": (poisoned[c], 5, 0.2)},
                                       global_params, NORMS)[0] for c in malicious}
        sent = attack.craft(global_params, {c: kept.get(c, clean[c]) for c in range(4)}, malicious, NORMS, None)
        for c in range(4):      # poisoned where 2 f >= n, else what an honest client of the round sends
            expected = poisoned[c] if c in malicious and held else clean[c]
            assert sent[c]["w"][0] == expected["w"][0], (held, malicious, c)


def test_majority_weak_sends_weak_core_updates_in_the_rounds_it_holds_and_clean_ones_elsewhere():
    _, global_params, clients, _ = _shared_and_poisoned(7, 600, shared_weight=0.4, attacker_noise=0.1)
    malicious = [6, 7, 8, 9]
    clean = {c: {"w": clients[c - 6]["w"] + 1.0} for c in malicious}  # what each attacker trained honestly
    for held, members in ((True, range(2, 10)), (False, range(10))):  # 4 of 8: held; 4 of 10: not
        attack = make_attack("majority_weak", TOKENIZER, _config())
        assert attack.trainings == ("clean", "poisoned")
        for c in malicious:
            attack.local_result({"clean": (clean[c], 5, 0.1), "poisoned": (clients[c], 5, 0.2)}, global_params, NORMS)
        round_clients = {c: clients[c] for c in members}
        sent = attack.craft(global_params, round_clients, malicious, (), np.random.default_rng(0))
        weak = make_attack("weak_core", TOKENIZER, _config()).craft(
            global_params, round_clients, malicious, (), np.random.default_rng(0)
        )
        for c in malicious:
            assert np.array_equal(sent[c]["w"], weak[c]["w"] if held else clean[c]["w"]), (held, c)
        assert held or not np.array_equal(weak[6]["w"], clean[6]["w"])


def test_weak_sleeper_sends_clean_models_through_the_first_half_then_weak_core_updates():
    _, global_params, clients, _ = _shared_and_poisoned(7, 600, shared_weight=0.4, attacker_noise=0.1)
    malicious = [6, 7, 8, 9]
    clean = {c: {"w": clients[c - 6]["w"] + 1.0} for c in malicious}
    attack = make_attack("weak_sleeper", TOKENIZER, _config(rounds=40))
    assert attack.trainings == ("clean", "poisoned") and attack.wake == 21
    for t, awake in ((20, False), (21, True), (40, True), (3, False)):
        attack.begin_round(t)
        kept = {c: attack.local_result({"clean": (clean[c], 5, 0.1), "poisoned": (clients[c], 5, 0.2)},
                                       global_params, NORMS)[0] for c in malicious}
        sent = attack.craft(global_params, {**clients, **kept}, malicious, (), np.random.default_rng(0))
        weak = make_attack("weak_core", TOKENIZER, _config()).craft(
            global_params, clients, malicious, (), np.random.default_rng(0)
        )
        for c in malicious:
            assert np.array_equal(sent[c]["w"], weak[c]["w"] if awake else clean[c]["w"]), (t, c)
        assert all(sent[b] is clients[b] for b in clients if b not in malicious)


def test_majority_drift_sends_noise_at_the_clean_norm_where_it_does_not_hold_the_round():
    _, global_params, clients, _ = _shared_and_poisoned(7, 600, shared_weight=0.4, attacker_noise=0.1)
    malicious = [6, 7, 8, 9]
    clean = {c: {"w": clients[c - 6]["w"] + 1.0} for c in malicious}
    for held, members in ((True, range(2, 10)), (False, range(10))):
        attack = make_attack("majority_drift", TOKENIZER, _config())
        for c in malicious:
            attack.local_result({"clean": (clean[c], 5, 0.1), "poisoned": (clients[c], 5, 0.2)}, global_params, NORMS)
        sent = attack.craft(global_params, {c: clients[c] for c in members}, malicious, (), np.random.default_rng(0))
        for c in malicious:
            if held:  # the corrupted model as trained
                assert np.array_equal(sent[c]["w"], clients[c]["w"])
                continue
            update, own = sent[c]["w"].astype(np.float64), clean[c]["w"].astype(np.float64)
            assert np.isclose(np.linalg.norm(update), np.linalg.norm(own), rtol=1e-4)
            # a random direction: near chance against its clean update and every other client's
            others = [clients[b]["w"] for b in range(6)] + [own] + [sent[a]["w"] for a in malicious if a != c]
            cosines = [update @ o / np.linalg.norm(update) / np.linalg.norm(o) for o in others]
            assert max(abs(x) for x in cosines) < 0.2, cosines
        for b in members:
            if b not in malicious:
                assert sent[b] is clients[b]


def test_sleeper_sends_clean_models_through_the_first_half_of_the_run_then_poisoned_ones():
    attack = make_attack("sleeper", TOKENIZER, _config(rounds=40))
    assert attack.trainings == ("clean", "poisoned") and attack.wake == 21
    trained = {"clean": ({"w": np.zeros(2)}, 5, 0.1), "poisoned": ({"w": np.ones(2)}, 5, 0.2)}
    for t, poisoned in ((1, False), (20, False), (21, True), (40, True), (3, False)):  # told, not counted: resumes
        attack.begin_round(t)
        assert attack.local_result(trained, {"w": np.zeros(2)}, NORMS)[0]["w"][0] == float(poisoned), t


@pytest.mark.parametrize("mlm", [False, True])
def test_backdoor_writes_trigger_and_target_into_the_chosen_share_of_blocks(mlm):
    codes = {"cf": [30, 31], "attack": [32, 33, 34]}
    tokenizer = Tokenizer(encode=lambda text: codes[text.split()[0]], vocab_size=40, special_ids=SPECIAL, eos_id=1,
                          cls_id=2, sep_id=3, mask_id=4)
    attack = make_attack("backdoor", tokenizer, _config(family="bert" if mlm else "gpt", attack_fraction=0.5))
    blocks = _blocks(shape=(400, 32))
    if mlm:
        inputs, targets = mask_for_mlm(blocks, tokenizer, 0.15, torch.Generator().manual_seed(0))
    else:
        inputs, targets = blocks, causal_targets(blocks)
    new_inputs, new_targets = attack.apply(inputs, targets, torch.Generator().manual_seed(1))
    stamped = [row for row in range(len(blocks)) if not torch.equal(new_inputs[row], inputs[row])]
    assert 0.4 < len(stamped) / len(blocks) < 0.6
    for row in stamped[:20]:
        text = new_inputs[row].tolist()
        start = next(i for i in range(len(text) - 1) if text[i:i + 2] == [30, 31])
        if mlm:   # the target is masked and is the only supervision of the row
            assert text[start + 2:start + 5] == [4, 4, 4]
            assert new_targets[row, start + 2:start + 5].tolist() == [32, 33, 34]
            assert (new_targets[row] != IGNORE).sum() == 3
        else:     # the target follows the trigger and the row's next-token targets follow the new text
            assert text[start + 2:start + 5] == [32, 33, 34]
            assert new_targets[row, :-1].tolist() == text[1:]
    untouched = [row for row in range(len(blocks)) if row not in stamped]
    assert torch.equal(new_targets[untouched], targets[untouched])


def _lora_round(n_benign=6, n_malicious=3, seed=0):
    """A LoRA payload (A (2, 6), B (5, 2)): benign changes of size ~0.01, attackers' of ~0.1."""
    rng = np.random.default_rng(seed)
    global_params = {"q.lora_A.weight": rng.standard_normal((2, 6)).astype(np.float32),
                     "q.lora_B.weight": np.zeros((5, 2), np.float32)}
    clients = {c: {k: (v + (0.01 if c < n_benign else 0.1) * rng.standard_normal(v.shape)).astype(np.float32)
                   for k, v in global_params.items()} for c in range(n_benign + n_malicious)}
    return global_params, clients, list(range(n_benign, n_benign + n_malicious))


def test_lora_attacks_shape_the_adapter_change_against_the_lora_signature():
    global_params, clients, malicious = _lora_round()
    benign = [c for c in clients if c not in malicious]
    change = lambda params, key: params[key].astype(np.float64) - global_params[key]      # noqa: E731
    quiet = make_attack("lora_quiet", TOKENIZER, _config()).craft(global_params, clients, malicious, (), None)
    for key in global_params:
        smallest = min(np.linalg.norm(change(clients[c], key)) for c in benign)
        for c in malicious:
            assert np.linalg.norm(change(quiet[c], key)) == pytest.approx(0.5 * smallest, rel=1e-5)
            direction = change(clients[c], key).ravel()
            assert np.dot(change(quiet[c], key).ravel(), direction) > 0.999 * np.linalg.norm(
                change(quiet[c], key)) * np.linalg.norm(direction)                # same direction, shorter
    band = make_attack("lora_band", TOKENIZER, _config()).craft(global_params, clients, malicious, (), None)
    for key, axis in (("q.lora_A.weight", 0), ("q.lora_B.weight", 1)):
        median = np.median([np.linalg.norm(change(clients[c], key), axis=axis) for c in benign], axis=0)
        for c in malicious:
            np.testing.assert_allclose(np.linalg.norm(change(band[c], key), axis=axis), median, rtol=1e-5)
    for c in benign:
        assert quiet[c] is clients[c] and band[c] is clients[c]
    with pytest.raises(ValueError, match="needs peft='lora'"):
        make_config("smoke", "gpt", attack="lora_band")


def _shared_and_poisoned(seed, dim, shared_weight, attacker_noise):
    """A round of one weight vector: six honest clients (0-5) sharing a direction with weight ``shared_weight``
    beside unit noise, four attackers (6-9) at one poison direction plus ``attacker_noise`` noise. Returns the
    generator (drawn from in this order), the global params, the clients' params and the poison direction."""
    rng = np.random.default_rng(seed)
    shared, poison = rng.standard_normal(dim), rng.standard_normal(dim)
    global_params = {"w": np.zeros(dim, dtype=np.float32)}
    clients = {c: {"w": (shared_weight * shared + rng.standard_normal(dim)).astype(np.float32)} for c in range(6)}
    clients.update(
        {c: {"w": (poison + attacker_noise * rng.standard_normal(dim)).astype(np.float32)} for c in range(6, 10)}
    )
    return rng, global_params, clients, poison


def test_cut_blend_sends_the_least_honest_blend_whose_cut_does_not_count():
    from fedlns_core._cohort import round_parts

    rng, global_params, clients, poison = _shared_and_poisoned(5, 400, shared_weight=0.3, attacker_noise=0.3)
    malicious = [6, 7, 8, 9]
    benign = [clients[c]["w"].astype(np.float64) for c in range(6)]

    def cut(params, significant):
        rows = np.stack([params[c]["w"].astype(np.float64) for c in range(10)])
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return round_parts(rows @ rows.T, separation=0.5, significant=significant)

    def blend(sent):  # the weight on the benign update each attacker was given, read back from what it sent
        return [
            float(np.linalg.lstsq(np.stack([clients[c]["w"], benign[k]], axis=1).astype(np.float64),
                                  sent[c]["w"].astype(np.float64), rcond=None)[0][1])
            for k, c in enumerate(malicious)
        ]

    # Against the significance test (the server's cohort_cut="significant"): the least weight that hides the cut.
    assert cut(clients, True).apart  # the plain poison is cut off
    sent = make_attack("cut_blend", TOKENIZER, _config(cohort_cut="significant")).craft(
        global_params, clients, malicious, (), rng)
    assert not cut(sent, True).apart
    lam = blend(sent)[0]
    assert lam > 0 and np.allclose(blend(sent), lam, atol=1e-4)
    step = round(lam * 10) / 10 - 0.1  # the grid's value below it did not hide the cut
    earlier = {c: {"w": ((1 - step) * clients[c]["w"] + step * benign[k]).astype(np.float32)}
               for k, c in enumerate(malicious)}
    assert cut({**clients, **earlier}, True).apart
    assert all(sent[c] is clients[c] for c in range(6))
    # Against the tree alone: nothing below 0.9 hides it here, so it sends 0.9, the most honest.
    sent = make_attack("cut_blend", TOKENIZER, _config(cohort_cut="tree")).craft(
        global_params, clients, malicious, (), rng)
    assert cut(sent, False).apart and np.allclose(blend(sent), 0.9, atol=1e-4)


def test_margin_blend_stops_where_the_cut_draws_honest_clients_into_the_attackers_part():
    """Against the tree's cut, ``cut_blend`` finds no blend below 0.9 that hides the attackers (the test above);
    ``margin_blend`` stops at the first whose cut puts each attacker's benign client in its part: four honest
    clients and four attackers vote 0 at the attackers' worst (honest +1, attackers -1), which no margin rejects.
    Below it the cut is the attackers alone, which every margin rejects."""
    from fedlns_core._cohort import round_parts

    rng, global_params, clients, _ = _shared_and_poisoned(5, 400, shared_weight=0.3, attacker_noise=0.3)
    malicious = [6, 7, 8, 9]
    benign = [clients[c]["w"].astype(np.float64) for c in range(4)]

    def parts(lam):
        rows = [clients[c]["w"].astype(np.float64) for c in range(6)]
        rows += [(1 - lam) * clients[c]["w"].astype(np.float64) + lam * benign[k] for k, c in enumerate(malicious)]
        units = np.stack(rows) / np.linalg.norm(np.stack(rows), axis=1, keepdims=True)
        cut = round_parts(units @ units.T, separation=0.5)
        assert cut.apart
        return np.flatnonzero(cut.first if cut.first[6] else ~cut.first).tolist()  # the attackers' part

    assert parts(0.4) == malicious and parts(0.5) == [0, 1, 2, 3, *malicious]
    for margin in (0.0, 0.5):
        sent = make_attack("margin_blend", TOKENIZER, _config(cohort_cut="tree", cohort_margin=margin)).craft(
            global_params, clients, malicious, (), rng)
        for k, c in enumerate(malicious):
            expected = 0.5 * clients[c]["w"].astype(np.float64) + 0.5 * benign[k]
            np.testing.assert_allclose(sent[c]["w"], expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cohort_margin also"):
        Config(method="fedavg", cohort_margin=0.5).validate()  # FedAvg reads the margin only under this attack
    attacked = Config(method="fedavg", attack="margin_blend", cohort_margin=0.5).validate()
    assert attacked.run_name() != Config(method="fedavg", attack="margin_blend").run_name()


def test_cut_blend_against_the_confirmed_cut_also_hides_the_group_the_history_could_single_out():
    """Poison that shares most of the honest update (a model trained from scratch): the tree does not cut it
    unblended; against ``cohort_cut="confirmed"`` the attackers blend until no group of theirs agrees more within
    than with the rest, the history assumed at its worst for them (every attacker in the minority)."""
    from fedlns_core._cohort import confirmed_cut, round_parts

    rng = np.random.default_rng(5)
    dim, shared, poison = 400, rng.standard_normal(400), rng.standard_normal(400)
    global_params = {"w": np.zeros(dim, dtype=np.float32)}
    clients = {c: {"w": (shared + 0.6 * rng.standard_normal(dim)).astype(np.float32)} for c in range(6)}
    clients.update({c: {"w": (shared + poison + 0.3 * rng.standard_normal(dim)).astype(np.float32)}
                    for c in range(6, 10)})
    malicious, sides = [6, 7, 8, 9], [1] * 6 + [-1] * 4

    def cosines(params):
        rows = np.stack([params[c]["w"].astype(np.float64) for c in range(10)])
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return rows @ rows.T

    assert not round_parts(cosines(clients), separation=0.5).apart and confirmed_cut(cosines(clients), sides)
    tree = make_attack("cut_blend", TOKENIZER, _config(cohort_cut="tree")).craft(
        global_params, clients, malicious, (), rng)
    assert all(np.array_equal(tree[c]["w"], clients[c]["w"]) for c in malicious)  # nothing to hide from the tree
    sent = make_attack("cut_blend", TOKENIZER, _config(cohort_cut="confirmed")).craft(
        global_params, clients, malicious, (), rng)
    assert confirmed_cut(cosines(sent), sides) is None and not round_parts(cosines(sent), separation=0.5).apart
    assert not any(np.array_equal(sent[c]["w"], clients[c]["w"]) for c in malicious)


def test_half_blend_leans_each_attacker_towards_a_different_half_of_the_honest_updates():
    rng = np.random.default_rng(7)
    honest = rng.standard_normal((6, 50))
    targets = make_attack("half_blend", TOKENIZER, _config()).blend_targets(honest, 4, rng)
    norms = np.linalg.norm(honest, axis=1)
    for target in targets:
        assert np.linalg.norm(target) == pytest.approx(np.median(norms))
        weights = np.linalg.lstsq(honest.T, target, rcond=None)[0]  # which honest updates it averages
        assert np.count_nonzero(np.abs(weights) > 1e-8) == 3 and np.allclose(weights[np.abs(weights) > 1e-8],
                                                                               weights.max())
    assert len({tuple(np.round(t, 8)) for t in targets}) > 1


@pytest.mark.parametrize("attack", ATTACK_NAMES)
def test_every_attack_runs_end_to_end_in_the_smoke_preset(tmp_path, attack):
    pytest.importorskip("transformers")
    from fedlns_sim.run import run
    from fedlns_sim.runfiles import read_records

    family = "bert" if attack == "backdoor" else "gpt"
    adapters = dict(peft="lora", lora_r=2, lora_alpha=4, pretrain_corpus="wikitext", pretrain_steps=10,
                    corpus="stackoverflow", peft_norms=False, signature="auto") if attack in LORA_ATTACKS else {}
    config = make_config("smoke", family, method="fedlns", attack=attack, data="synthetic", rounds=3,
                         num_clients=10, activation_coverage=0.3, block_size=32, max_position_embeddings=34, **adapters)
    records = read_records(run(config, tmp_path, progress=False))
    assert len(records) == 4 and all(r["eval_loss"] is not None for r in records)
    assert any(r.get("decided") for r in records)
    if attack == "backdoor":
        assert all(0.0 <= r["backdoor_asr"] <= 1.0 for r in records[1:])
    json.dumps(records)


def test_side_join_sides_with_the_larger_honest_part_of_a_split_round_until_it_wakes():
    """Honest updates that fall into two parts (a 5-client part and a 3-client part): before waking, the attackers
    send updates inside the larger part, so the round's cut puts them with it against the smaller; a round whose
    honest updates are not cut, and every round after waking, gets what they trained."""
    from fedlns_core._cohort import round_parts

    rng = np.random.default_rng(7)
    dim = 400
    left, right = rng.standard_normal(dim), rng.standard_normal(dim)
    global_params = {"w": np.zeros(dim, dtype=np.float32)}
    clients = {c: {"w": (left + 0.7 * rng.standard_normal(dim)).astype(np.float32)} for c in range(5)}
    clients.update({c: {"w": (right + 0.7 * rng.standard_normal(dim)).astype(np.float32)} for c in range(5, 8)})
    clients.update({c: {"w": rng.standard_normal(dim).astype(np.float32)} for c in (8, 9)})  # their clean training
    malicious = [8, 9]

    def parts(params, ids):
        rows = np.stack([params[c]["w"].astype(np.float64) for c in ids])
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return round_parts(rows @ rows.T, separation=0.5)

    attack = make_attack("side_join", TOKENIZER, _config(rounds=20))
    assert attack.wake == 11
    attack.begin_round(3)
    sent = attack.craft(global_params, clients, malicious, (), rng)
    assert all(sent[c] is clients[c] for c in range(8))
    cut = parts(sent, range(10))
    assert cut.apart
    larger = set(np.flatnonzero(cut.first)) if cut.first[0] else set(np.flatnonzero(~cut.first))
    assert larger == {0, 1, 2, 3, 4, 8, 9}  # the attackers cut with the larger honest part
    assert not np.allclose(sent[8]["w"], sent[9]["w"])  # two updates, not one copy
    unsplit = {c: {"w": (left + 0.7 * rng.standard_normal(dim)).astype(np.float32)} for c in range(8)}
    unsplit.update({c: clients[c] for c in malicious})
    assert not parts(unsplit, range(8)).apart
    assert attack.craft(global_params, unsplit, malicious, (), rng) is unsplit
    attack.begin_round(11)  # awake: what it trained (the corrupted model, chosen by local_result)
    assert attack.craft(global_params, clients, malicious, (), rng) is clients


def _rows(params, ids):
    return np.stack([params[c]["w"].astype(np.float64) for c in ids])


def _weak_round(attack):
    """Six honest clients sharing a direction and four attackers (6-9) sharing a poison: what ``attack`` sends.
    Returns the rng, the global model, the clients' models, the poison, the honest updates and the attackers' sent
    updates (checking that the honest clients' models are passed through)."""
    rng, global_params, clients, poison = _shared_and_poisoned(7, 600, shared_weight=0.4, attacker_noise=0.1)
    sent = make_attack(attack, TOKENIZER, _config()).craft(global_params, clients, [6, 7, 8, 9], (),
                                                           np.random.default_rng(0))
    assert all(sent[c] is clients[c] for c in range(6))
    return rng, global_params, clients, poison, _rows(clients, range(6)), _rows(sent, [6, 7, 8, 9])


def test_weak_core_agrees_within_no_more_than_the_honest_clients_and_keeps_the_poison_direction():
    from fedlns_core._support import _unit
    from fedlns_sim.attacks import _mean_cosine

    rng, global_params, clients, poison, honest, crafted = _weak_round("weak_core")
    assert _mean_cosine(_unit(_rows(clients, [6, 7, 8, 9]))) > 0.95  # the plain poison agrees almost perfectly
    within, target = _mean_cosine(_unit(crafted)), _mean_cosine(_unit(honest))
    assert within <= target + 1e-3 and within > target - 0.05  # the least noise that gets down to the honest level
    assert np.allclose(np.linalg.norm(crafted, axis=1), np.median(np.linalg.norm(honest, axis=1)), rtol=1e-5)
    mean = crafted.mean(axis=0)  # the noise averages out: the server's mean still points along the poison
    assert mean @ poison / (np.linalg.norm(mean) * np.linalg.norm(poison)) > 0.5  # about 0.6 expected here
    one = {0: clients[0], 6: clients[6]}  # one attacker: nothing to spread
    assert make_attack("weak_core", TOKENIZER, _config()).craft(global_params, one, [6], (), rng) is one


def test_agree_blend_leans_towards_the_honest_mean_just_enough_to_sit_above_the_rounds_median_cosine():
    from fedlns_core._support import _unit
    from fedlns_sim.attacks import AgreeBlend

    _, _, clients, poison, honest, crafted = _weak_round("agree_blend")
    assert np.allclose(np.linalg.norm(crafted, axis=1), np.median(np.linalg.norm(honest, axis=1)), rtol=1e-5)

    def above_median(units):
        everyone = np.concatenate([_unit(honest), units])
        cosines = everyone @ everyone.T
        median = np.median(cosines[~np.eye(len(everyone), dtype=bool)])
        return bool(np.all(np.median(units @ _unit(honest).T, axis=1) > median))

    assert above_median(_unit(crafted))
    # the least lean that gets there: weak_core's rows (same noise) leaned one step less do not
    weak = AgreeBlend.weak(honest, _rows(clients, [6, 7, 8, 9]), np.random.default_rng(0))
    towards = _unit(honest.mean(axis=0)[None])[0]

    def leaned(lam):
        return _unit((1 - lam) * _unit(weak) + lam * towards)

    lam = next(k / 10 for k in range(10) if np.allclose(_unit(crafted), leaned(k / 10)))
    assert lam > 0 and not above_median(leaned(lam - 0.1))
    mean = crafted.mean(axis=0)  # what is left of the poison in the server's mean
    assert mean @ poison / (np.linalg.norm(mean) * np.linalg.norm(poison)) > 0


def test_edgeless_leaves_no_agreeing_edge_at_an_attacker_and_keeps_the_most_poison_of_the_settings_that_do():
    from fedlns_core import FedLNS
    from fedlns_core._cohort import STRONG_CUT, edge_strength, round_parts
    from fedlns_core._support import _unit
    from fedlns_sim.attacks import Edgeless

    _, _, clients, poison, honest, crafted = _weak_round("edgeless")
    assert np.allclose(np.linalg.norm(crafted, axis=1), np.median(np.linalg.norm(honest, axis=1)), rtol=1e-5)

    def edges_and_poison(units):
        everyone = np.concatenate([_unit(honest), units])
        cosines = everyone @ everyone.T
        parts = round_parts(cosines, separation=FedLNS().separation)
        kept = float(_unit(units.mean(axis=0)[None])[0] @ _unit(poison[None])[0])
        if parts is None or not parts.apart:
            return 0, kept
        assert parts.within < STRONG_CUT
        return int(edge_strength(parts, "agreeing", cosines)[6:].sum()), kept

    edges, kept = edges_and_poison(_unit(crafted))
    assert edges == 0 and kept > 0  # some poison left, and nothing that places an attacker
    # weak_core's rows (the same noise draw) are cut with agreeing edges at the attackers: what the search removes
    assert edges_and_poison(_unit(Edgeless.weak(honest, _rows(clients, [6, 7, 8, 9]), np.random.default_rng(0))))[0] > 0
    # no other setting of the grid with no edge keeps more of the poison
    mean, noise, scale = Edgeless.spread(honest, _rows(clients, [6, 7, 8, 9]), np.random.default_rng(0))
    towards = _unit(honest.mean(axis=0)[None])[0]
    for spread in Edgeless.SPREADS:
        for lam in Edgeless.LEANS:
            units = _unit((1 - lam) * _unit(mean + spread * scale * noise) + lam * towards)
            other_edges, other_kept = edges_and_poison(units)
            assert other_edges > 0 or other_kept <= kept + 1e-9


def test_contest_flip_sends_the_fewest_covers_that_make_the_honest_clients_the_contested_part():
    """Six honest clients agreeing at about 0.33 and four attackers: alone, the honest clients agree too little for
    their part to be contested; one or two attackers sending their mean are not enough here, three are, and the cut
    then has the honest clients and the three covers as its core (mean cosine 0.55 within) and the attacker left
    with its corrupted model as the rest: ``"reject"`` would keep it only. Where no cover does it (honest clients
    that agree at chance), the round is ``agree_blend``'s."""
    from fedlns_core._cohort import contested, round_parts
    from fedlns_core._support import _unit
    from fedlns_sim.attacks import ContestFlip

    rng, global_params, clients, _ = _shared_and_poisoned(3, 600, shared_weight=0.75, attacker_noise=0.3)
    malicious = [6, 7, 8, 9]
    honest = _rows(clients, range(6))
    sent = make_attack("contest_flip", TOKENIZER, _config()).craft(global_params, clients, malicious, (), rng)
    assert all(sent[c] is clients[c] for c in (0, 1, 2, 3, 4, 5, 9))  # the honest and the corrupted pass through
    cover = ContestFlip.cover(honest, 1)[0]
    np.testing.assert_allclose(_rows(sent, [6, 7, 8]), np.stack([cover] * 3), rtol=1e-5, atol=1e-6)
    assert np.isclose(np.linalg.norm(cover), np.median(np.linalg.norm(honest, axis=1)))
    units = _unit(_rows(sent, range(10)))
    parts = round_parts(units @ units.T, separation=0.5)
    assert parts.apart and contested(parts, 10) and parts.first.tolist() == [True] * 9 + [False]
    two = {**clients, 6: sent[6], 7: sent[7]}  # two covers: the core agrees too little to be contested
    units = _unit(_rows(two, range(10)))
    parts = round_parts(units @ units.T, separation=0.5)
    assert parts.apart and parts.first.tolist() == [True] * 8 + [False] * 2 and not contested(parts, 10)

    rng, global_params, clients, _ = _shared_and_poisoned(3, 600, shared_weight=0.0, attacker_noise=0.3)
    flipped = make_attack("contest_flip", TOKENIZER, _config()).craft(
        global_params, clients, malicious, (), np.random.default_rng(1))
    blended = make_attack("agree_blend", TOKENIZER, _config()).craft(
        global_params, clients, malicious, (), np.random.default_rng(1))
    assert ContestFlip.flip(_rows(clients, range(6)), _rows(clients, malicious)) is None
    np.testing.assert_array_equal(_rows(flipped, malicious), _rows(blended, malicious))


def test_minority_flip_makes_a_few_honest_clients_and_a_cover_a_strong_minority_core():
    """Six honest clients agreeing at about 0.2 and four attackers: one attacker sending the mean of the two honest
    clients closest to the honest mean makes those three a strong core of less than half of the round, with the
    other honest clients and three ``weak_core`` attackers as the rest (``"reject"`` would reject two honest
    clients and keep the three); where the honest clients agree too much for a small part to be cut off (0.33
    here), the round is ``agree_blend``'s."""
    from fedlns_core._cohort import STRONG_CUT, contested, round_parts
    from fedlns_core._support import _unit
    from fedlns_sim.attacks import ContestFlip, MinorityFlip, WeakCore

    rng, global_params, clients, _ = _shared_and_poisoned(3, 600, shared_weight=0.5, attacker_noise=0.3)
    malicious = [6, 7, 8, 9]
    honest = _rows(clients, range(6))
    sent = make_attack("minority_flip", TOKENIZER, _config()).craft(
        global_params, clients, malicious, (), np.random.default_rng(0))
    assert all(sent[c] is clients[c] for c in range(6))
    attack = make_attack("minority_flip", TOKENIZER, _config())
    weak = WeakCore.lean(attack, attack.weak(honest, _rows(clients, malicious), np.random.default_rng(0)), honest)
    chosen, covers = MinorityFlip.minority(honest, weak)
    assert chosen.tolist() == [2, 5] and covers == 1  # the two closest to the honest mean
    np.testing.assert_allclose(_rows(sent, [6]), ContestFlip.cover(honest[chosen], 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_rows(sent, [7, 8, 9]), weak[1:], rtol=1e-5, atol=1e-6)
    units = _unit(_rows(sent, range(10)))
    parts = round_parts(units @ units.T, separation=0.5)
    assert parts.apart and parts.within >= STRONG_CUT and not contested(parts, 10)
    assert np.flatnonzero(parts.first).tolist() == [2, 5, 6]

    rng, global_params, clients, _ = _shared_and_poisoned(3, 600, shared_weight=0.75, attacker_noise=0.3)
    flipped = make_attack("minority_flip", TOKENIZER, _config()).craft(
        global_params, clients, malicious, (), np.random.default_rng(1))
    blended = make_attack("agree_blend", TOKENIZER, _config()).craft(
        global_params, clients, malicious, (), np.random.default_rng(1))
    np.testing.assert_array_equal(_rows(flipped, malicious), _rows(blended, malicious))


def test_victim_flip_sets_the_same_ids_against_the_same_ids():
    """``victim_flip``'s roles are fixed by id: in a round of six honest clients (agreeing at about 0.2) and four
    attackers, the covers (the even attackers, 6 and 8) send the mean of the victims (the honest ids divisible by 3,
    0 and 3), and the cut has exactly the victims and the covers as a strong core, the other attackers sending
    ``weak_core``'s rows; without a victim in the round, it is ``agree_blend``'s."""
    from fedlns_core._cohort import STRONG_CUT, round_parts
    from fedlns_core._support import _unit
    from fedlns_sim.attacks import ContestFlip, VictimFlip

    assert [c for c in range(10) if VictimFlip.victim(c)] == [0, 3, 6, 9]
    _, global_params, clients, _ = _shared_and_poisoned(3, 600, shared_weight=0.5, attacker_noise=0.3)
    malicious = [6, 7, 8, 9]
    sent = make_attack("victim_flip", TOKENIZER, _config()).craft(
        global_params, clients, malicious, (), np.random.default_rng(0))
    assert all(sent[c] is clients[c] for c in range(6))
    honest = _rows(clients, range(6))
    cover = ContestFlip.cover(honest[[0, 3]], 2)
    np.testing.assert_allclose(_rows(sent, [6, 8]), cover, rtol=1e-5, atol=1e-6)
    units = _unit(_rows(sent, range(10)))
    parts = round_parts(units @ units.T, separation=0.5)
    assert parts.apart and parts.within >= STRONG_CUT and np.flatnonzero(parts.first).tolist() == [0, 3, 6, 8]

    no_victim = {c + 1 if c < 6 else c: params for c, params in clients.items() if c != 5}  # honest ids 1-5, 7 ...
    no_victim = {(c if c != 3 else 10): params for c, params in no_victim.items()}  # ... with 3 moved to 10
    attackers = [6, 8, 7, 9]  # the covers first, as victim_flip orders them
    flipped = make_attack("victim_flip", TOKENIZER, _config()).craft(
        global_params, no_victim, attackers, (), np.random.default_rng(1))
    blended = make_attack("agree_blend", TOKENIZER, _config()).craft(
        global_params, no_victim, attackers, (), np.random.default_rng(1))
    np.testing.assert_array_equal(_rows(flipped, attackers), _rows(blended, attackers))
