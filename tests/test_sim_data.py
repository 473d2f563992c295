"""Corpora, tokenizers and blocks of fedlns_sim."""

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("tokenizers")
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.data import (build_corpus, causal_blocks, load_pretrained_tokenizer, load_texts,  # noqa: E402
                             mlm_blocks, synthetic_corpus)

REPO = Path(__file__).resolve().parents[1]


def _shared_data():
    folder = Path(os.environ.get("FEDLNS_DATA", REPO.parent / "shared" / "data"))
    if not (folder / "tokenizers").is_dir():
        pytest.skip("shared data folder not found (set FEDLNS_DATA)")
    return folder


def test_blocks_are_cut_from_the_concatenated_stream():
    blocks = causal_blocks([[5, 6, 7], [8, 9]], block_size=3, eos_id=1)
    assert blocks.tolist() == [[5, 6, 7], [1, 8, 9]]          # the trailing EOS does not fill a block
    bert = mlm_blocks([[5, 6, 7, 8, 9, 10, 11]], block_size=5, cls_id=2, sep_id=3)
    assert bert.tolist() == [[2, 5, 6, 7, 3], [2, 8, 9, 10, 3]]


@pytest.mark.parametrize("family", ["gpt", "bert", "llama"])
def test_synthetic_corpus_with_trained_vocabulary(tmp_path, family):
    config = make_config("smoke", family, data="synthetic")
    corpus = build_corpus(config, None, tmp_path)
    assert corpus.train.shape == (80, 16) and corpus.train.dtype == np.int64
    assert 0 < len(corpus.eval) <= 32
    assert corpus.train.max() < corpus.tokenizer.vocab_size
    assert len(list(tmp_path.glob("tokenizer-*.json"))) == 1        # cached for the other runs
    if family == "bert":
        assert (corpus.train[:, 0] == corpus.tokenizer.cls_id).all()
        assert (corpus.train[:, -1] == corpus.tokenizer.sep_id).all()
        assert corpus.task == "mlm"
    else:
        assert corpus.tokenizer.eos_id in corpus.tokenizer.special_ids and corpus.task == "causal"
    again = build_corpus(config, None, tmp_path)
    assert np.array_equal(again.train, corpus.train)


def test_synthetic_corpus_is_deterministic():
    assert synthetic_corpus(seed=3, n_train=5, n_eval=2) == synthetic_corpus(seed=3, n_train=5, n_eval=2)
    assert synthetic_corpus(seed=3, n_train=5, n_eval=2) != synthetic_corpus(seed=4, n_train=5, n_eval=2)


def test_shared_data_splits_and_paper_tokenizers():
    folder = _shared_data()
    train, test, source = load_texts("gpt", folder)
    assert load_texts("wikitext", folder) == (train, test, source)   # a family stands for its corpus
    assert "substitution" in source and len(train) > 2000 and len(test) > 2000
    train, test, _ = load_texts("bert", folder)
    total = sum(map(len, train)) + sum(map(len, test))
    assert 0.08 < sum(map(len, test)) / total < 0.12                  # final 10% of the text
    train, test, _ = load_texts("llama", folder, max_train=100, max_eval=10)
    assert (len(train), len(test)) == (100, 10)
    gpt2 = load_pretrained_tokenizer("gpt", folder)
    assert gpt2.vocab_size == 50257 and gpt2.eos_id == 50256 and gpt2.encode("Hello world") == [15496, 995]
    bert = load_pretrained_tokenizer("bert", folder)
    assert bert.vocab_size == 30522 and bert.mask_id == 103 and {0, 101, 102, 103} <= set(bert.special_ids)
    llama = load_pretrained_tokenizer("llama", folder)
    assert llama.vocab_size == 32000 and llama.eos_id == 2 and 2 in llama.special_ids


@pytest.mark.parametrize("family", ["gpt", "bert", "llama"])
def test_trained_vocabulary_is_identical_across_trainings(tmp_path, family):
    from fedlns_sim.data import synthetic_corpus, train_bpe_tokenizer

    texts, _ = synthetic_corpus(seed=3, n_train=300, n_eval=10)
    first = train_bpe_tokenizer(family, texts, 200, tmp_path / "a" / "tokenizer.json")
    second = train_bpe_tokenizer(family, texts, 200, tmp_path / "b" / "tokenizer.json")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert first.encode(texts[0]) == second.encode(texts[0])
