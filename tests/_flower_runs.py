"""Helpers shared by the Flower integration tests: bounded processes and outcome checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DIR = ROOT / "examples" / "flower"
BIN_DIR = Path(sys.executable).parent


def short_temp_dir(prefix: str) -> Path:
    """A short temporary folder: Ray and gRPC put Unix sockets in it (path limit ~107 bytes)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def base_env(**extra: str) -> dict[str, str]:
    """Environment for Flower processes: offline, the example importable, quiet telemetry."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLE_DIR), env.get("PYTHONPATH")]))
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.update(extra)
    return env


def start(command: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a process in its own session (so it and its children can be stopped together)."""
    handle = open(log_path, "wb")
    try:
        return subprocess.Popen(
            command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=EXAMPLE_DIR, start_new_session=True
        )
    finally:
        handle.close()  # the child keeps its own descriptor


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a process we started, and the process group it leads, by its own PID."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # Children (e.g. flwr-clientapp) live on in the group after their leader exits.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if process.poll() is None:
        process.wait(timeout=grace)


def attacker_nodes(record_dir: Path) -> tuple[set[int], set[int]]:
    """(attacker node ids, benign node ids) from the ClientApps' ground-truth records."""
    attackers, benign = set(), set()
    for path in record_dir.glob("node-*.json"):
        record = json.loads(path.read_text())
        (attackers if record["attacker"] else benign).add(int(record["node_id"]))
    return attackers, benign


def screening_rounds(log_path: Path) -> list[dict]:
    """The JSON lines FedLNSStrategy wrote, one per training round."""
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


def assert_attackers_rejected(log_path: Path, record_dir: Path, *, num_attackers: int, num_benign: int) -> None:
    """In every active round the attackers are screened out and every benign client kept."""
    attackers, benign = attacker_nodes(record_dir)
    assert len(attackers) == num_attackers and len(benign) == num_benign, (attackers, benign)
    rounds = screening_rounds(log_path)
    active = [entry["screening"] for entry in rounds if entry["screening"] and entry["screening"]["active"]]
    assert active, f"no active screening round in {rounds}"
    for screening in active:
        rejected = {int(node): reason for node, reason in screening["rejected"].items()}
        assert set(rejected) == attackers, screening
        assert all(reason.startswith("screened:") for reason in rejected.values()), rejected
        assert {int(node) for node in screening["retained"]} == benign, screening
