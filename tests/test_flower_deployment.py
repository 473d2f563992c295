"""A real loopback Flower deployment: flower-superlink, three flower-supernode, ``flwr run``.

Every process is bound to 127.0.0.1, bounded in time, and stopped by its own PID.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest

pytest.importorskip("flwr")
pytest.importorskip("transformers")

from _flower_runs import (  # noqa: E402
    BIN_DIR,
    EXAMPLE_DIR,
    assert_attackers_rejected,
    base_env,
    short_temp_dir,
    start,
    stop,
)

NUM_NODES = 3
NUM_ATTACKERS = 1
STARTUP_LIMIT = 90  # seconds for the SuperLink to listen
RUN_LIMIT = 420  # seconds for `flwr run`; two rounds take about 2-3 minutes on two shared cores


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, log_file, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"flower-superlink exited with {process.returncode}:\n{log_file.read_text()[-3000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(f"flower-superlink did not listen on 127.0.0.1:{port} within {limit}s")


@pytest.mark.slow
@pytest.mark.skipif(not (BIN_DIR / "flower-superlink").exists(), reason="flwr console scripts not installed")
def test_loopback_deployment_rejects_the_target_corrupting_node(tmp_path):
    flwr_home = short_temp_dir("fedlns-flwr-")
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    output_dir = tmp_path / "output"
    # flower-superlink starts flower-superexec by name, so the venv's scripts go on PATH.
    env = base_env(FLWR_HOME=str(flwr_home), PATH=os.pathsep.join([str(BIN_DIR), os.environ.get("PATH", "")]))

    superlink_port = free_port()
    (flwr_home / "config.toml").write_text(
        '[superlink]\ndefault = "loopback"\n\n'
        f'[superlink.loopback]\naddress = "127.0.0.1:{superlink_port}"\ninsecure = true\n'
    )
    processes: list[subprocess.Popen] = []
    try:
        superlink_log = tmp_path / "superlink.log"
        superlink = start(
            [str(BIN_DIR / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(superlink_port)],
            superlink_log, env,
        )
        processes.append(superlink)
        wait_for_port(superlink_port, superlink, superlink_log, STARTUP_LIMIT)

        for partition in range(NUM_NODES):
            processes.append(start(
                [
                    str(BIN_DIR / "flower-supernode"), "--insecure",
                    "--superlink", f"127.0.0.1:{superlink_port}",
                    "--host", "127.0.0.1", "--port", str(free_port()),
                    "--node-config", f"partition-id={partition} num-partitions={NUM_NODES}",
                ],
                tmp_path / f"supernode-{partition}.log", env,
            ))

        run_config = " ".join([
            "num-server-rounds=2",
            f"num-attackers={NUM_ATTACKERS}",
            f"min-nodes={NUM_NODES}",
            f"activation-threshold={NUM_NODES}",
            f'output-dir="{output_dir}"',
            f'record-dir="{record_dir}"',
        ])
        run_log = tmp_path / "flwr-run.log"
        run = start(
            [str(BIN_DIR / "flwr"), "run", str(EXAMPLE_DIR), "loopback", "--run-config", run_config, "--stream"],
            run_log, env,
        )
        processes.append(run)
        try:
            run.wait(timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`flwr run` did not finish in {RUN_LIMIT}s; log:\n{run_log.read_text()[-4000:]}")
        assert run.returncode == 0, run_log.read_text()[-4000:]
    finally:
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(flwr_home, ignore_errors=True)

    log_path = output_dir / "screening.jsonl"
    assert log_path.exists(), (tmp_path / "flwr-run.log").read_text()[-4000:]
    assert_attackers_rejected(
        log_path, record_dir, num_attackers=NUM_ATTACKERS, num_benign=NUM_NODES - NUM_ATTACKERS
    )
    rounds = [line for line in log_path.read_text().splitlines() if line.strip()]
    assert len(rounds) == 2
