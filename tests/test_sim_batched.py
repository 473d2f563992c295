"""Batched client training (``batch_clients``): the clients of a round trained as one batched model give the
numbers of one client at a time, up to float rounding.

Tolerances: parameters within 1e-4 absolute (a thirtieth of one AdamW step at the smoke preset's learning rate
3e-3; AdamW divides by the root of the second moment, so coordinates whose gradient is near zero turn a
rounding-level gradient difference into a visible, still tiny, step difference), losses and example counts
exact to 1e-5 relative.
"""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedlns_sim.attacks import make_attack  # noqa: E402
from fedlns_sim.client import TrainingJob, train_client, train_clients_batched, why_not_batched  # noqa: E402
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.data import build_corpus, resolve_data_dir  # noqa: E402
from fedlns_sim.models import build_model, get_params  # noqa: E402
from fedlns_sim.run import run  # noqa: E402
from fedlns_sim.runfiles import read_records  # noqa: E402


def _setup(family, tmp_path, **overrides):
    config = make_config("smoke", family, data="synthetic", malicious_fraction=0.4, **overrides)
    corpus = build_corpus(config, resolve_data_dir(config.data), Path(tmp_path) / "cache")
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.tokenizer.vocab_size)
    return config, corpus, model


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_batched_clients_match_one_at_a_time(family, tmp_path):
    config, corpus, model = _setup(family, tmp_path)
    attack = make_attack("target_corruption", corpus.tokenizer, config)
    global_params = get_params(model)
    # unequal data (non-IID sizes, a last batch smaller than batch_size, one client with a single batch),
    # an attacked client, and the same client trained twice (clean and poisoned, as norm_mimicry asks)
    sizes = [9, 14, 4, 3, 11, 11]
    jobs, start = [], 0
    for client, size in enumerate(sizes):
        jobs.append(TrainingJob(corpus.train[start:start + size], attack if client == 1 else None, config.seed,
                                3, client))
        start += size
    jobs.append(TrainingJob(jobs[1].blocks, None, config.seed, 3, 1))
    batched = train_clients_batched(model, global_params, jobs, config, corpus.task, corpus.tokenizer)
    for job, (params, n_examples, loss) in zip(jobs, batched):
        expected = train_client(model, global_params, job.blocks, config, corpus.task, corpus.tokenizer,
                                attack=job.attack, seed=job.seed, round_index=job.round_index, client=job.client)
        assert set(params) == set(expected[0])
        for key, value in expected[0].items():
            assert params[key].dtype == value.dtype
            np.testing.assert_allclose(params[key], value, rtol=0, atol=1e-4, err_msg=key)
        assert n_examples == expected[1] == config.local_epochs * len(job.blocks)
        assert loss == pytest.approx(expected[2], rel=1e-5)
    # training moved the weights (the comparison above is not between two copies of the start)
    assert max(np.max(np.abs(batched[0][0][k] - global_params[k])) for k in global_params) > 1e-3


def test_dropout_models_are_refused_not_silently_different(tmp_path):
    config, corpus, model = _setup("bert", tmp_path)                  # BERT keeps its config's dropout
    assert "dropout" in why_not_batched(model, config)
    with pytest.raises(ValueError, match="batch_clients: the model has dropout"):
        train_clients_batched(model, get_params(model), [TrainingJob(corpus.train[:4], None, 1, 1, 0)], config,
                              corpus.task, corpus.tokenizer)
    with pytest.raises(ValueError, match="batch_clients=on: the model has dropout"):
        run(make_config("smoke", "bert", data="synthetic", batch_clients="on"), tmp_path / "runs", progress=False)


def test_a_batched_run_follows_the_sequential_one(tmp_path):
    # a whole run, with an attack whose attackers train twice (norm_mimicry); 3 rounds
    settings = dict(data="synthetic", rounds=3, method="fedavg", attack="norm_mimicry", malicious_fraction=0.4)
    sequential = read_records(run(make_config("smoke", "gpt", **settings), tmp_path / "a", progress=False))
    batched = read_records(run(make_config("smoke", "gpt", batch_clients="on", **settings), tmp_path / "b",
                               progress=False))
    assert [r["sampled"] for r in batched[1:]] == [r["sampled"] for r in sequential[1:]]
    for ours, theirs in zip(batched[1:], sequential[1:]):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-4)
        assert ours["perplexity"] == pytest.approx(theirs["perplexity"], rel=1e-3)


def test_auto_batches_only_where_it_is_equivalent(tmp_path):
    run_dir = run(make_config("smoke", "bert", data="synthetic", rounds=1, batch_clients="auto"), tmp_path,
                  progress=False)                                     # BERT: one client at a time, no error
    assert len(read_records(run_dir)) == 2
