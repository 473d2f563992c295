"""Does a study's command still make the runs its results folder archived?

A study script resumes by its runs: a sweep skips a run whose folder is finished, or whose experiment (its stored
config) a finished folder of another name holds, such as a run named before the names hashed only the settings that
differ from the defaults. When a default of ``FedLNS()`` changes, a script that relied on it makes other runs (the
setting now differs from the simulator's ``LEGACY`` value) and would re-run the new default instead of what it
measured. This runs the command with a stand-in for ``fedlns-sim`` (``FEDLNS_SIM``) whose ``sweep`` only writes the
names and experiments of the runs it would make, and compares them with the runs in the results folders' archives.
Nothing is trained; other ``fedlns-sim`` commands do nothing; a command that reads finished runs (a table step) fails
there, and the runs gathered until then are compared.

Usage: python scripts/check_study_names.py RESULTS [RESULTS ...] -- COMMAND [ARGS ...]
e.g.   python scripts/check_study_names.py docs/results/robust -- bash scripts/results_robust.sh runs/names-check

Prints how many archived runs the command makes (by name, or by experiment under an earlier name) and the first of
those it does not; exit status 1 if any. Run it before changing a default, and on each study script after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fedlns_sim.runfiles import experiment_key, stored_config
from fedlns_sim.runstore import stored_runs

STAND_IN = """#!{python}
import os, sys
from fedlns_sim import cli, sweep
from fedlns_sim.runfiles import experiment_key

def named(configs, out, **options):
    with open(os.environ["FEDLNS_NAMES"], "a") as names:
        names.writelines(config.run_name() + "\\t" + experiment_key(config.to_dict()) + "\\n" for config in configs)
    return {{"ran": 0, "skipped": len(configs), "failed": []}}

if sys.argv[1:2] != ["sweep"]:
    sys.exit(0)
sweep.sweep = named
sys.exit(cli.main(sys.argv[1:]))
"""


def named_runs(command: list[str]) -> tuple[set[str], set[str], int]:
    """The runs ``command``'s sweeps would make, by name and by experiment (:func:`experiment_key`), and its exit
    status."""
    with tempfile.TemporaryDirectory() as scratch:
        stand_in, names = Path(scratch) / "fedlns-sim", Path(scratch) / "names.txt"
        stand_in.write_text(STAND_IN.format(python=sys.executable))
        stand_in.chmod(0o755)
        names.touch()
        environment = {**os.environ, "FEDLNS_SIM": str(stand_in), "FEDLNS_NAMES": str(names)}
        status = subprocess.run(command, env=environment, stdout=subprocess.DEVNULL, check=False).returncode
        runs = [line.split("\t") for line in names.read_text().splitlines()]
        return {name for name, _ in runs}, {experiment for _, experiment in runs}, status


def _experiment(files: dict[str, bytes]) -> str | None:
    """An archived run's experiment, None where its ``config.json`` holds no config."""
    config = json.loads(files["config.json"]).get("config") if "config.json" in files else None
    return experiment_key(stored_config(config)) if config else None


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == 0 or argv[-1] == "--":
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    split = argv.index("--")
    archived = {name: _experiment(files) for folder in argv[:split] for name, files in stored_runs(folder)}
    names, experiments, status = named_runs(argv[split + 1 :])
    missing = sorted(name for name, key in archived.items() if name not in names and key not in experiments)
    note = "" if status == 0 else f" (the command stopped with status {status}: the runs up to there)"
    print(f"{len(archived) - len(missing)} of {len(archived)} archived runs made by the command{note}")
    for name in missing[:20]:
        print(f"  not made: {name}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
