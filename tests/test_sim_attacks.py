"""The target-corruption attack and BERT masking of fedlns_sim."""

import pytest

torch = pytest.importorskip("torch")
from fedlns_sim.attacks import Attack, TargetCorruption, make_attack  # noqa: E402
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
    with pytest.raises(NotImplementedError):
        Attack(TOKENIZER).apply(blocks, targets, torch.Generator())
