"""A real Flower simulation (Ray backend) of the example app: FedLNS screens out the attackers."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")
pytest.importorskip("transformers")

from _flower_runs import EXAMPLE_DIR, assert_attackers_rejected, run_simulation_script  # noqa: E402

NUM_CLIENTS = 6
NUM_ATTACKERS = 2
TIME_LIMIT = 360  # seconds; a run takes about 1-2 minutes on two shared cores


@pytest.mark.slow
def test_simulation_rejects_the_target_corrupting_clients(tmp_path):
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    output_dir = tmp_path / "output"
    arguments = [
        "--num-supernodes", str(NUM_CLIENTS),
        "--num-cpus", "2",
        "--set", "num-server-rounds=2",
        "--set", f"num-attackers={NUM_ATTACKERS}",
        "--set", f"min-nodes={NUM_CLIENTS}",
        "--set", f"activation-threshold={NUM_CLIENTS}",
        "--set", f"output-dir={output_dir}",
        "--set", f"record-dir={record_dir}",
        "--set", f"state-path={tmp_path / 'state.npz'}",
    ]
    run_simulation_script(EXAMPLE_DIR / "simulate.py", arguments, tmp_path / "simulation.log", time_limit=TIME_LIMIT)

    assert_attackers_rejected(
        output_dir / "screening.jsonl", record_dir,
        num_attackers=NUM_ATTACKERS, num_benign=NUM_CLIENTS - NUM_ATTACKERS,
    )
    # The screener's state was saved: two rounds screened, every client in the bank.
    from fedlns_core import FedLNS

    state = FedLNS.load(tmp_path / "state.npz")
    assert state.round_ == 2 and len(state.bank) == NUM_CLIENTS
