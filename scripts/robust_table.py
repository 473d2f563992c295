"""One seed of the robustness matrix as the markdown table of docs/attacks.md (the report does not join these runs).

Reads the archived attack matrix (``docs/results/attacks/runs.csv``: every method under the twelve original
attacks) and a folder of runs made by ``scripts/results_robust.sh`` (``fedlns_default`` everywhere, every method
under the three new attacks; ``rounds.jsonl`` or the archive's ``rounds.jsonl.gz``), GPT IID.

Usage: python scripts/robust_table.py RUNS_DIR [SEED]     (default seed 100)
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import sys
from pathlib import Path

ATTACKS = ("target_corruption", "backdoor", "sign_flip", "scaling", "gaussian", "alie", "ipm", "minmax",
           "norm_mimicry", "norm_freeze", "decoy", "delta_budget", "norm_noise", "band_mimic", "ipm_search")
DEFENCES = {"norm_bounded_fedavg": "Norm-Bound", "coordinate_median": "Median", "trimmed_mean": "Trimmed",
            "multi_krum": "Multi-Krum", "flame": "FLAME", "fedlns": "FedLNS.paper()",
            "fedlns_multi_krum": "paper+Multi-Krum", "fedlns_median": "paper+Median",
            "fedlns_norm_bound": "paper+Norm-Bound"}


def records(run: Path) -> list[dict]:
    path = run / "rounds.jsonl"
    text = path.read_text() if path.exists() else gzip.decompress((run / "rounds.jsonl.gz").read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def cells(runs: Path, seed: str) -> dict:
    out = {}
    archived = Path(__file__).resolve().parent.parent / "docs/results/attacks/runs.csv"
    for row in csv.DictReader(archived.open()):
        if row["seed"] == seed and row["family"] == "gpt" and row["partition"] == "iid":
            attack = row["attack"] if float(row["fraction"]) > 0 else "-"
            out[(row["method"], float(row["fraction"]), attack)] = (float(row["perplexity"]),
                                                                   float(row["last10_perplexity"]))
    for run in sorted(runs.glob("gpt-iid-*")):
        config = json.loads((run / "config.json").read_text())["config"]
        rounds = records(run)[1:]
        if str(config["seed"]) != seed or len(rounds) < config["rounds"]:
            continue
        ppl = [r["perplexity"] if r["perplexity"] is not None else math.inf for r in rounds]
        attack = config["attack"] if config["malicious_fraction"] > 0 else "-"
        out[(config["method"], config["malicious_fraction"], attack)] = (min(ppl), sum(ppl[-10:]) / 10)
    return out


def shown(value: float) -> str:
    return "diverged" if not math.isfinite(value) or value > 1e5 else f"{value:.0f}"


def main(argv: list[str]) -> int:
    runs, seed = Path(argv[0]), (argv[1] if len(argv) > 1 else "100")
    found = cells(runs, seed)
    for fraction in (0.4, 0.2):
        oracle = found[("oracle", fraction, "target_corruption")]
        print(f"\n{fraction:.0%} malicious (oracle {oracle[0]:.0f} / {oracle[1]:.0f})\n")
        print("| attack | FedAvg | best other defence | FedLNS.paper() | FedLNS() | FedLNS() vs FedAvg | vs best other |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for attack in ATTACKS:
            fedavg, default = found.get(("fedavg", fraction, attack)), found.get(("fedlns_default", fraction, attack))
            paper = found.get(("fedlns", fraction, attack))
            others = [(value[0], method) for (method, frac, att), value in found.items()
                      if frac == fraction and att == attack and method in DEFENCES]
            if not (fedavg and default and paper and others):
                continue
            best = min(others)
            print(f"| `{attack}` | {shown(fedavg[0])} / {shown(fedavg[1])} | {DEFENCES[best[1]]} {shown(best[0])} | "
                  f"{shown(paper[0])} / {shown(paper[1])} | {shown(default[0])} / {shown(default[1])} | "
                  f"{100 * (default[0] / fedavg[0] - 1):+.1f}% | {100 * (default[0] / best[0] - 1):+.1f}% |")
    clean, default = found.get(("fedavg", 0.0, "-")), found.get(("fedlns_default", 0.0, "-"))
    if clean and default:
        print(f"\nwithout attackers: FedAvg {clean[0]:.1f} / {clean[1]:.1f}, FedLNS() {default[0]:.1f} / {default[1]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
