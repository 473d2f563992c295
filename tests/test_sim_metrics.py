"""Evaluation metrics, detection rates and best-checkpoint selection of fedlns_sim."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.data import IGNORE, causal_targets  # noqa: E402
from fedlns_sim.metrics import (best_checkpoint, detection_counts, detection_rates, evaluate,  # noqa: E402
                                perplexity, token_entropy)
from fedlns_sim.models import build_model  # noqa: E402


@pytest.mark.parametrize("vocab", [2, 7, 1024, 50257])
def test_entropy_of_uniform_is_log_vocab(vocab):
    logits = torch.full((3, 5, vocab), 2.5)
    assert torch.allclose(token_entropy(logits), torch.full((3, 5), math.log(vocab)), atol=1e-4)


def test_entropy_of_one_hot_is_zero_and_matches_scipy():
    from scipy.stats import entropy

    assert float(token_entropy(torch.tensor([[0.0, 80.0, 0.0]]))[0]) < 1e-6
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(0))
    probs = torch.softmax(logits, -1).numpy()
    assert np.allclose(token_entropy(logits).numpy(), entropy(probs, axis=-1), atol=1e-5)


@pytest.mark.parametrize("family", ["gpt", "bert", "llama"])
def test_evaluate_reports_perplexity_exp_of_loss_over_supervised_positions(family):
    config = make_config("smoke", family)
    torch.manual_seed(0)
    model = build_model(config, 60)
    blocks = torch.randint(5, 60, (6, 16), generator=torch.Generator().manual_seed(1))
    targets = causal_targets(blocks)
    targets[:, ::3] = IGNORE          # as for MLM: only some positions count
    result = evaluate(model, blocks, targets, batch_size=4)
    with torch.no_grad():
        logits = model(input_ids=blocks).logits
    keep = targets != IGNORE
    expected = torch.nn.functional.cross_entropy(logits[keep], targets[keep]).item()
    assert result["eval_positions"] == int(keep.sum())
    assert result["eval_loss"] == pytest.approx(expected, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(result["eval_loss"]), rel=1e-9)
    assert result["entropy"] == pytest.approx(token_entropy(logits[keep]).mean().item(), rel=1e-5)
    assert perplexity(1e4) == float("inf")


def test_detection_counts_and_rates_by_hand():
    counts = detection_counts(sampled=[1, 2, 3, 4, 5, 6], kept=[1, 2, 6], malicious={3, 4, 6, 9})
    assert counts == {"tp": 2, "fp": 1, "fn": 1, "tn": 2}
    assert detection_rates(**counts) == {"tpr": 2 / 3, "fpr": 1 / 3, "precision": 2 / 3}
    rates = detection_rates(0, 0, 0, 5)
    assert math.isnan(rates["tpr"]) and rates["fpr"] == 0.0 and math.isnan(rates["precision"])


def test_best_checkpoint_is_lowest_loss_of_trained_rounds_earliest_on_ties():
    records = [{"round": 0, "eval_loss": 1.0}, {"round": 1, "eval_loss": 5.0}, {"round": 2, "eval_loss": 3.0},
               {"round": 3, "eval_loss": None}, {"round": 4, "eval_loss": 3.0}, {"round": 5, "eval_loss": 4.0}]
    records[3]["eval_loss"] = float("nan")
    assert best_checkpoint(records)["round"] == 2          # round 0 (the untrained model) is not a checkpoint
    with pytest.raises(ValueError, match="no trained rounds"):
        best_checkpoint(records[:1])
