"""Helpers shared by the Flower integration tests: bounded processes and outcome checks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DIR = ROOT / "examples" / "flower"
PEFT_EXAMPLE_DIR = ROOT / "examples" / "flower_peft"
BIN_DIR = Path(sys.executable).parent


def short_temp_dir(prefix: str) -> Path:
    """A short temporary folder: Ray and gRPC put Unix sockets in it (path limit ~107 bytes)."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def base_env(example_dir: Path = EXAMPLE_DIR, **extra: str) -> dict[str, str]:
    """Environment for Flower processes: offline, the example importable, quiet telemetry."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(example_dir), env.get("PYTHONPATH")]))
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.update(extra)
    return env


def start(command: list[str], log_path: Path, env: dict[str, str], cwd: Path = EXAMPLE_DIR) -> subprocess.Popen:
    """Start a process in its own session, detached from the test runner's terminal signals."""
    handle = open(log_path, "wb")
    try:
        return subprocess.Popen(
            command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
    finally:
        handle.close()  # the child keeps its own descriptor


def _descendants(pid: int) -> list[int]:
    """PIDs of every live descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            # Field 4 of /proc/PID/stat is the parent PID; the name (field 2) may hold spaces.
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop a process we started and everything it started, each by its own PID.

    Flower's servers start helpers in new sessions (flower-superexec, flwr-serverapp,
    flwr-clientapp), so the process group is not enough: the descendants are listed
    before the leader is stopped and signalled one by one afterwards.
    """
    descendants = _descendants(process.pid) if process.poll() is None else []
    if process.poll() is None:
        _signal(process.pid, signal.SIGTERM)  # lets Flower shut its helpers down cleanly
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal(process.pid, signal.SIGKILL)
            process.wait(timeout=grace)
    for pid in descendants:
        _signal(pid, signal.SIGTERM)
    for pid in descendants:
        _signal(pid, signal.SIGKILL)


def run_simulation_script(script: Path, arguments: list[str], log_path: Path, *, time_limit: float,
                          example_dir: Path = EXAMPLE_DIR) -> None:
    """Run an example's simulate.py in a child process with a time limit; fail the test with its log tail."""
    import pytest

    ray_dir = short_temp_dir("fedlns-ray-")
    process = start([sys.executable, str(script), *arguments], log_path,
                    base_env(example_dir, RAY_TMPDIR=str(ray_dir)), cwd=example_dir)
    try:
        process.wait(timeout=time_limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"simulation did not finish in {time_limit}s; log:\n{log_path.read_text()[-4000:]}")
    finally:
        stop(process)
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert process.returncode == 0, log_path.read_text()[-4000:]


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
    """In every active round the screen rejects attackers and only attackers, and every benign client is kept.

    Not "every attacker in every round": in a round of six clients whose bank is that round alone, the paper's
    one-vs-two-component mixture sometimes isolates the more deviant attacker and keeps the other (which one
    depends on the client order, and Flower draws node ids at random); docs/api.md, "Guarantees", states the limit.
    """
    attackers, benign = attacker_nodes(record_dir)
    assert len(attackers) == num_attackers and len(benign) == num_benign, (attackers, benign)
    rounds = screening_rounds(log_path)
    active = [entry["screening"] for entry in rounds if entry["screening"] and entry["screening"]["active"]]
    assert active, f"no active screening round in {rounds}"
    for screening in active:
        rejected = {node: reason for node, reason in screening["rejected"]}   # [id, reason] pairs
        assert rejected and set(rejected) <= attackers, screening
        assert all(reason.startswith("screened:") for reason in rejected.values()), rejected
        assert {int(node) for node in screening["retained"]} >= benign, screening
