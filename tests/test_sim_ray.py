"""``fedlns-sim sweep --ray ADDRESS``: runs as Ray tasks on a Ray instance this test starts, on 127.0.0.1, and
stops by its own PID. A run interrupted before the sweep is resumed by it; a second sweep skips everything."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from fedlns_sim import runfiles  # noqa: E402
from fedlns_sim.cli import main  # noqa: E402
from fedlns_sim.config import make_config  # noqa: E402
from fedlns_sim.run import run  # noqa: E402


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def ray_head():
    """A one-node Ray cluster on 127.0.0.1 (``ray start --head --block``), stopped by its PID afterwards."""
    ray_cli = Path(sys.executable).with_name("ray")
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")          # unix socket paths must stay short
    port = _free_port()
    log = open(os.path.join(temp, "head.log"), "w")
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                             f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                             "--disable-usage-stats", f"--temp-dir={temp}"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, open(os.path.join(temp, "head.log")).read()
            time.sleep(0.5)
        else:
            pytest.fail("the Ray head did not start within 120 s")
        yield address
    finally:
        head.send_signal(signal.SIGTERM)                         # --block: stops what it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_sweep_on_ray_runs_resumes_and_skips(tmp_path, capsys, ray_head):
    out = tmp_path / "runs"
    interrupted = make_config("smoke", "gpt", method="fedlns", malicious_fraction=0.4, seed=100, data="synthetic")
    run(interrupted, out, progress=False, stop_after=1)
    assert runfiles.completed_round(out / interrupted.run_name()) == 1

    argv = ["sweep", "--preset", "smoke", "--data", "synthetic", "--families", "gpt", "--partitions", "iid",
            "--fractions", "0.4", "--methods", "fedavg,fedlns", "--seeds", "100", "--no-references",
            "--no-progress", "--out", str(out), "--ray", ray_head]
    assert main(argv) == 0
    assert "sweep: 2 ran, 0 already finished, 0 failed" in capsys.readouterr().out
    for method in ("fedavg", "fedlns"):
        config = make_config("smoke", "gpt", method=method, malicious_fraction=0.4, seed=100, data="synthetic")
        assert runfiles.is_finished(out / config.run_name(), config.rounds)

    # the resumed run has the numbers of an uninterrupted one
    fresh = run(interrupted, tmp_path / "fresh", progress=False)
    resumed = [r["perplexity"] for r in runfiles.read_records(out / interrupted.run_name())]
    assert resumed == [r["perplexity"] for r in runfiles.read_records(fresh)]

    assert main(argv) == 0
    assert "sweep: 0 ran, 2 already finished" in capsys.readouterr().out
