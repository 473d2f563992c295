"""The ``paper`` preset on a GPU: one round's client training per family, then FedAvg against FedLNS at 40%.

Run: ``python benchmarks/paper_gpu.py --out DIR`` (``--family``, ``--seed``, ``--minutes``; data from
``$FEDLNS_DATA`` or ``../shared/data``; ``--preset smoke --device cpu`` is a dry run of the script). Writes ``DIR/bench.md``, ``DIR/summary.md``, the run
folders under ``DIR/runs`` and one log per run under ``DIR/logs``.

1. ``bench_batched.py --preset paper --device cuda --no-dropout``: round 1 of seed 100 per family, one client at a
   time and (where the model has no dropout) as one batched model, alone on the GPU.
2. Six runs of one family at the preset's settings (IID, the paper's attack, 40% malicious, one seed), started
   together on the one GPU: FedAvg, ``FedLNS.paper()`` (``fedlns``), ``FedLNS()`` (``fedlns_default``), the oracle,
   clean FedAvg (no attackers) and ``FedLNS()`` against ``norm_freeze`` (attackers send back the normalization
   parameters they received). With ``--minutes`` they stop when the time is up (a run resumes from its last
   finished round when started again with the same command), and the summary compares them over the rounds all
   six finished: the first rounds of the paper's 200, not finished runs.

Before any of that, a ``smoke``-preset run of GPT and LLaMA on the GPU (LLaMA batched) fails fast if the CUDA
path is broken.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from fedlns_sim.config import make_config
from fedlns_sim.report.stats import detection_rates, screening_counts
from fedlns_sim.runfiles import read_meta, read_records

HERE = Path(__file__).resolve().parent
# (label, method, overrides): the comparison of step 2; FedAvg and FedLNS at 40% with the references around them.
RUNS = (
    ("clean FedAvg (no attackers)", "fedavg", {"malicious_fraction": 0.0}),
    ("FedAvg", "fedavg", {}),
    ("FedLNS.paper()", "fedlns", {}),
    ("FedLNS()", "fedlns_default", {}),
    ("oracle (drops the attackers)", "oracle", {}),
    ("FedLNS() vs norm_freeze", "fedlns_default", {"attack": "norm_freeze"}),
)


def _settings(seed: int, overrides: dict) -> dict:
    """The config overrides of one run of the comparison (the command's ``--set`` values and its folder's name)."""
    return {"malicious_fraction": 0.4, "seed": seed, **overrides}


def _sim(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedlns_sim.cli", *args]


def _smoke(out: Path, device: str) -> None:
    """A few rounds of the device's path (GPT one client at a time, LLaMA batched); raises if either fails."""
    for family, batch in (("gpt", "off"), ("llama", "on")):
        subprocess.run(
            _sim(
                "run",
                "--preset",
                "smoke",
                "--family",
                family,
                "--method",
                "fedlns",
                "--device",
                device,
                "--set",
                "malicious_fraction=0.4",
                "--set",
                f"batch_clients={batch}",
                "--out",
                str(out / "smoke"),
                "--no-progress",
            ),
            check=True,
            timeout=300,
        )


def _bench(out: Path, preset: str, device: str, timeout: float) -> None:
    with open(out / "bench.md", "w") as table:
        try:
            subprocess.run(
                [
                    sys.executable,
                    str(HERE / "bench_batched.py"),
                    "--preset",
                    preset,
                    "--device",
                    device,
                    "--repeats",
                    "3",
                    "--no-dropout",
                ],
                stdout=table,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            print(f"bench_batched.py stopped after {timeout:.0f} s", file=table)


def _compare(out: Path, preset: str, device: str, family: str, seed: int, until: float | None) -> None:
    """Start the six runs together; stop them at ``until`` (a ``time.monotonic`` value) if they are not done."""
    (out / "logs").mkdir(exist_ok=True)
    # Threads per run so that all runs' threads fit the cores with one to spare: oversubscribed OpenMP pools spin
    # (six runs of two threads on two cores here left the FedAvg runs at round 0 for minutes).
    threads = max(1, (os.cpu_count() or 1) // (len(RUNS) + 1))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    processes = []
    for index, (_, method, overrides) in enumerate(RUNS):
        settings = {**_settings(seed, overrides), "threads": threads}
        command = _sim(
            "run",
            "--preset",
            preset,
            "--family",
            family,
            "--method",
            method,
            "--device",
            device,
            "--out",
            str(out / "runs"),
            "--no-progress",
            *[arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")],
        )
        log = open(out / "logs" / f"{index}-{method}.log", "w")  # noqa: SIM115 (closed below)
        processes.append(
            (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True), log)
        )
    while any(p.poll() is None for p, _ in processes) and (until is None or time.monotonic() < until):
        time.sleep(2)
    for process, log in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # its own session: the run and nothing else
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        log.close()


def _summary(out: Path, preset: str, device: str, family: str, seed: int) -> str:
    """The six runs over the rounds that all of them finished: perplexity every 10 rounds, detection, timing."""
    configs = {
        label: make_config(preset, family, method=method, **_settings(seed, overrides))
        for label, method, overrides in RUNS
    }
    folders = {label: out / "runs" / config.run_name() for label, config in configs.items()}
    records = {label: read_records(folder) for label, folder in folders.items()}  # [] for a run not started
    common = min((r[-1]["round"] if r else 0) for r in records.values())
    rounds = next(iter(configs.values())).rounds
    name = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    lines = [
        f"{family.upper()}, `{preset}` preset, IID, seed {seed}, on {name} (torch {torch.__version__}); the "
        f"six runs shared it. Rounds all six finished: {common} of {rounds}.",
        "",
    ]
    if not common:
        return "\n".join([*lines, "No round finished in every run (see logs/)."])
    checkpoints = sorted({*range(10, common + 1, 10), common})
    lines += [
        "| run | " + " | ".join(f"ppl @{t}" for t in checkpoints) + " | TPR / FPR | attackers-only rounds | "
        "client / server / eval s per round |",
        "|---|" + "---:|" * (len(checkpoints) + 3),
    ]
    for label, run_records in records.items():
        rows = [r for r in run_records if r["round"] <= common]
        by_round = {r["round"]: r for r in rows}
        counts = screening_counts(
            (r["sampled"], r["kept"], r.get("malicious_sampled", []))
            for r in rows[1:]
            if r.get("active") and "kept" in r
        )
        rates = detection_rates(counts["tp"], counts["fp"], counts["fn"], counts["tn"])
        screens = "FedLNS" in label
        detection = (
            f"{'-' if math.isnan(rates['tpr']) else format(rates['tpr'], '.2f')} / {rates['fpr']:.2f}"
            if screens and counts["tp"] + counts["fp"] + counts["fn"] + counts["tn"]
            else "-"
        )
        timing = " / ".join(
            f"{sum(r[key] for r in rows[1:]) / max(len(rows) - 1, 1):.2f}"
            for key in ("client_time_s", "server_time_s", "eval_time_s")
        )
        lines.append(
            f"| {label} | "
            + " | ".join(f"{by_round[t]['perplexity']:.1f}" for t in checkpoints)
            + f" | {detection} | {counts['attackers_only'] if screens else '-'} | {timing} |"
        )
    unigram = (read_meta(folders[RUNS[1][0]]) or {}).get("unigram_perplexity")
    if unigram:
        lines += ["", f"Unigram perplexity of the evaluation set (from the training split): {unigram:.1f}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--family", default="gpt", choices=("gpt", "bert", "llama"))
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop everything after this long (default: no limit: the six runs finish their 200 rounds)",
    )
    parser.add_argument("--skip-bench", action="store_true", help="only the comparison")
    parser.add_argument("--preset", default="paper", help="settings of the runs (default: paper)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device (a dry run on the CPU: --preset smoke --device cpu)")
    start = time.monotonic()
    until = None if args.minutes is None else start + 60 * args.minutes - 30  # 30 s for the summary
    args.out.mkdir(parents=True, exist_ok=True)
    _smoke(args.out, args.device)
    print(f"smoke runs on {args.device} passed ({time.monotonic() - start:.0f} s)", flush=True)
    if not args.skip_bench:
        _bench(
            args.out,
            args.preset,
            args.device,
            timeout=180 if until is None else max(30.0, min(180.0, (until - time.monotonic()) / 3)),
        )
        print((args.out / "bench.md").read_text(), flush=True)
    _compare(args.out, args.preset, args.device, args.family, args.seed, until)
    summary = _summary(args.out, args.preset, args.device, args.family, args.seed)
    (args.out / "summary.md").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
