"""Evaluation metrics, detection rates and best-checkpoint selection of fedlns_sim."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.data import IGNORE, causal_targets  # noqa: E402
from fedlns_sim.metrics import (detection_counts, evaluate, perplexity, token_entropy,  # noqa: E402
                                unigram_perplexity)
from fedlns_sim.report.stats import auc, best_checkpoint, detection_rates, recovery, t_interval  # noqa: E402
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


def test_best_checkpoint_skips_a_diverged_round_written_as_null():
    """``rounds.jsonl`` stores a NaN loss as null; a diverged run must still have a best checkpoint."""
    records = [{"round": 0, "eval_loss": 9.0}, {"round": 1, "eval_loss": None}, {"round": 2, "eval_loss": 4.0},
               {"round": 3, "eval_loss": float("inf")}]
    assert best_checkpoint(records)["round"] == 2
    assert best_checkpoint(records[:2])["round"] == 1     # every round diverged: the first, not a crash


def test_unigram_perplexity_by_hand_and_against_a_direct_count():
    train = np.array([[5, 5, 6, 7], [5, 6, 6, 1]])            # token 1 plays a special token (never a target)
    targets = np.array([[5, 6, IGNORE, 7]])
    p = np.bincount([5, 5, 6, 7, 5, 6, 6], minlength=8) + 1.0
    p = p / p.sum()
    expected = math.exp(-np.mean(np.log(p[[5, 6, 7]])))
    assert unigram_perplexity(train, targets, vocab_size=8, special_ids=(1,)) == pytest.approx(expected)
    # with no special tokens the count includes token 1 too: lower probability everywhere else
    assert unigram_perplexity(train, targets, vocab_size=8) > expected


def test_paired_interval_recovery_and_auc_against_scipy():
    from scipy import stats

    differences = [-12.0, -8.5, -15.0, -9.0, -11.0]
    result = t_interval(differences)
    low, high = stats.t.interval(0.95, 4, loc=np.mean(differences), scale=stats.sem(differences))
    assert (result["low"], result["high"]) == (pytest.approx(low), pytest.approx(high))
    assert math.isnan(t_interval([1.0])["low"])
    assert recovery(attacked=450.0, defended=450.0, oracle=300.0) == 0.0
    assert recovery(attacked=450.0, defended=300.0, oracle=300.0) == 1.0
    assert math.isnan(recovery(attacked=300.0, defended=280.0, oracle=310.0))   # no damage to recover
    positive, negative = [0.9, 0.8, 0.35, 0.5], [0.1, 0.4, 0.35, 0.6, 0.2]
    from sklearn.metrics import roc_auc_score
    expected = roc_auc_score([1] * 4 + [0] * 5, positive + negative)
    assert auc(positive, negative) == pytest.approx(expected)
