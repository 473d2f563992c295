"""Does a study's command still name the runs its results folder archived?

A study script resumes by run name: a sweep skips the runs whose folders are finished. When a default of
``FedLNS()`` changes, a script that relied on it names other runs (the setting now differs from the simulator's
``LEGACY`` value, so it enters the name's hash) and would re-run the new default instead of what it measured.
This runs the command with a stand-in for ``fedlns-sim`` (``FEDLNS_SIM``) whose ``sweep`` only writes the names of
the runs it would make, and compares them with the run names in the results folders' archives. Nothing is trained;
other ``fedlns-sim`` commands do nothing; a command that reads finished runs (a table step) fails there, and the
names gathered until then are compared.

Usage: python scripts/check_study_names.py RESULTS [RESULTS ...] -- COMMAND [ARGS ...]
e.g.   python scripts/check_study_names.py docs/results/robust -- bash scripts/results_robust.sh runs/names-check

Prints how many archived runs the command names and the first of those it does not; exit status 1 if any.
Run it before changing a default, and on each study script after.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fedlns_sim.runstore import run_names

STAND_IN = """#!{python}
import os, sys
from fedlns_sim import cli, sweep

def named(configs, out, **options):
    with open(os.environ["FEDLNS_NAMES"], "a") as names:
        names.writelines(config.run_name() + "\\n" for config in configs)
    return {{"ran": 0, "skipped": len(configs), "failed": []}}

if sys.argv[1:2] != ["sweep"]:
    sys.exit(0)
sweep.sweep = named
sys.exit(cli.main(sys.argv[1:]))
"""


def named_runs(command: list[str]) -> tuple[set[str], int]:
    """The run names ``command``'s sweeps would make, and its exit status."""
    with tempfile.TemporaryDirectory() as scratch:
        stand_in, names = Path(scratch) / "fedlns-sim", Path(scratch) / "names.txt"
        stand_in.write_text(STAND_IN.format(python=sys.executable))
        stand_in.chmod(0o755)
        names.touch()
        environment = {**os.environ, "FEDLNS_SIM": str(stand_in), "FEDLNS_NAMES": str(names)}
        status = subprocess.run(command, env=environment, stdout=subprocess.DEVNULL, check=False).returncode
        return set(names.read_text().split()), status


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == 0 or argv[-1] == "--":
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    split = argv.index("--")
    archived = {name for folder in argv[:split] for name in run_names(folder)}
    named, status = named_runs(argv[split + 1 :])
    missing = sorted(archived - named)
    note = "" if status == 0 else f" (the command stopped with status {status}: the names up to there)"
    print(f"{len(archived) - len(missing)} of {len(archived)} archived runs named by the command{note}")
    for name in missing[:20]:
        print(f"  not named: {name}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
