"""The fine-tuning scenario: a pretrained base model, then federated LoRA (+ norm) fine-tuning on other text."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
from fedlns_core import NormSelector  # noqa: E402
from fedlns_sim.config import FAMILIES, make_config  # noqa: E402
from fedlns_sim.run import run  # noqa: E402
from fedlns_sim.runfiles import read_records  # noqa: E402


def _config(family="gpt", method="fedlns", **overrides):
    values = dict(data="synthetic", rounds=4, num_clients=10, activation_coverage=0.3, pretrain_corpus="wikitext",
                  pretrain_steps=30, corpus="stackoverflow", peft="lora", lora_r=2, lora_alpha=4)
    return make_config("smoke", family, method=method, **{**values, **overrides})


def _final_payload(run_dir):
    with np.load(run_dir / "checkpoint-0004" / "global.npz") as stored:
        return {k: stored[k] for k in stored.files}


@pytest.mark.parametrize("family", FAMILIES)
def test_clients_send_the_lora_and_norm_payload_and_fedlns_screens_it(tmp_path, family):
    run_dir = run(_config(family), tmp_path, progress=False)
    meta = json.loads((run_dir / "config.json").read_text())
    payload = _final_payload(run_dir)
    assert payload and all(".lora_A." in k or ".lora_B." in k or k in NormSelector().select(payload) for k in payload)
    assert any(".lora_A." in k for k in payload) and NormSelector().select(payload)
    assert meta["payload_parameters"] == sum(a.size for a in payload.values()) < meta["n_parameters"] / 2
    records = read_records(run_dir)
    assert records[-1]["perplexity"] < records[0]["perplexity"]            # fine-tuning helps
    active = [r for r in records[1:] if r["decided"]]
    assert active and all("kept" in r and r["tp"] + r["fp"] + r["fn"] + r["tn"] == 5 for r in active)


def test_round_zero_is_the_base_model_and_the_base_is_shared_and_cached(tmp_path):
    # LoRA's B starts at zero: before any round the global model computes what the pretrained base does, for every
    # method and seed (the base never depends on them); the base is trained once and then read from the cache
    first = read_records(run(_config(method="fedavg", seed=1), tmp_path, progress=False))[0]
    cached = sorted((tmp_path / "_cache").glob("base-gpt-*.npz"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    second = read_records(run(_config(method="fedlns", seed=2), tmp_path, progress=False))[0]
    assert first["perplexity"] == second["perplexity"] and cached[0].stat().st_mtime_ns == stamp
    scratch = read_records(run(_config(method="fedavg", seed=1, pretrain_corpus="", pretrain_steps=0), tmp_path,
                               progress=False))[0]
    assert first["perplexity"] < scratch["perplexity"]                     # pretraining did something


def test_without_trainable_norms_the_payload_holds_adapters_only(tmp_path):
    run_dir = run(_config(method="fedavg", peft_norms=False), tmp_path, progress=False)
    payload = _final_payload(run_dir)
    assert payload and all(".lora_A." in k or ".lora_B." in k for k in payload)


def test_a_base_model_is_deterministic(tmp_path):
    a = read_records(run(_config(method="fedavg"), tmp_path / "a", progress=False))
    b = read_records(run(_config(method="fedavg"), tmp_path / "b", progress=False))
    timing = ("client_time_s", "server_time_s", "eval_time_s")
    assert [{k: v for k, v in r.items() if k not in timing} for r in a] == \
           [{k: v for k, v in r.items() if k not in timing} for r in b]


@pytest.mark.parametrize("overrides, message", [
    (dict(pretrain_corpus="wikipedia"), "pretrain_corpus must be one of"),
    (dict(corpus="books"), "corpus must be one of"),
    (dict(pretrain_steps=0), "pretrain_corpus needs pretrain_steps >= 1"),
    (dict(peft="prefix"), "peft must be one of"),
    (dict(lora_r=0), "lora_r must be >= 1"),
])
def test_bad_fine_tuning_settings_are_refused_with_the_reason(overrides, message):
    with pytest.raises(ValueError, match=message):
        _config(**overrides)


def test_fedlns_refuses_a_payload_without_norms_unless_told_which_signature_to_use(tmp_path):
    with pytest.raises(ValueError, match="no normalization parameter for FedLNS"):
        _config(peft_norms=False)
    with pytest.raises(ValueError, match="needs peft='lora'"):
        _config(peft="", signature="lora_stats")
    run_dir = run(_config(peft_norms=False, signature="lora_stats", record_signatures=True), tmp_path, progress=False)
    records = read_records(run_dir)
    active = [r for r in records[1:] if r["decided"]]
    assert active and all(len(r["delta"]) == 5 for r in active)
    with np.load(run_dir / "signatures" / "round-0004.npz") as stored:
        # per LoRA module (GPT smoke: one layer, c_attn 16 -> 48): 16 column norms of dA, 48 row norms of dB
        assert stored["signatures"].shape == (5, 16 + 48) and (stored["signatures"] >= 0).all()
