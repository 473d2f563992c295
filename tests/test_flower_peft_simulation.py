"""The FlowerTune-style PEFT example in a real Flower simulation: LoRA-only payloads (norms frozen, as the stacks
ship), attackers that poison the adapters rejected by the LoRA signature, the held-out loss falls."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from _flower_runs import PEFT_EXAMPLE_DIR, ROOT, assert_attackers_rejected, run_simulation_script  # noqa: E402

NUM_CLIENTS = 6
NUM_ATTACKERS = 2
NUM_ROUNDS = 4
TIME_LIMIT = 300  # seconds; a run takes about a minute on two shared cores
TEXT = Path(os.environ.get("FEDLNS_DATA", ROOT.parent / "shared" / "data")) / "tiny-shakespeare" / "input.txt"


@pytest.mark.slow
@pytest.mark.skipif(not TEXT.is_file(), reason=f"needs the project's data folder ({TEXT}; set FEDLNS_DATA)")
def test_peft_simulation_rejects_attackers_and_the_held_out_loss_falls(tmp_path):
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    output_dir = tmp_path / "output"
    arguments = [
        "--num-supernodes", str(NUM_CLIENTS), "--num-cpus", "2",
        "--set", f"num-server-rounds={NUM_ROUNDS}",
        "--set", f"num-attackers={NUM_ATTACKERS}",
        "--set", f"min-nodes={NUM_CLIENTS}",
        "--set", f"activation-threshold={NUM_CLIENTS}",
        "--set", f"data-file={TEXT}",
        "--set", f"output-dir={output_dir}",
        "--set", f"record-dir={record_dir}",
    ]
    began = time.monotonic()
    run_simulation_script(PEFT_EXAMPLE_DIR / "simulate.py", arguments, tmp_path / "simulation.log",
                          time_limit=TIME_LIMIT, example_dir=PEFT_EXAMPLE_DIR)

    assert_attackers_rejected(output_dir / "screening.jsonl", record_dir,
                              num_attackers=NUM_ATTACKERS, num_benign=NUM_CLIENTS - NUM_ATTACKERS)
    rounds = [json.loads(line) for line in (output_dir / "screening.jsonl").read_text().splitlines()]
    assert len(rounds) == NUM_ROUNDS and all(entry["screening"]["active"] for entry in rounds)
    # Norms frozen: the payload is LoRA A/B only, and FedLNS() screens it by the LoRA signature.
    assert all(entry["screening"]["signature"] == "lora" for entry in rounds)
    keys = rounds[0]["screening"]["signature_keys"]
    assert keys and all(key.endswith((".lora_A.weight column norms", ".lora_B.weight row norms")) for key in keys)
    losses = [json.loads(line)["loss"] for line in (output_dir / "held_out_loss.jsonl").read_text().splitlines()]
    assert len(losses) == NUM_ROUNDS + 1  # round 0 (initial adapter) and after every round
    assert losses[-1] < losses[0] - 0.1, losses
    print(f"held-out loss by round {[round(loss, 3) for loss in losses]}; {time.monotonic() - began:.0f}s")
