"""Command line: ``fedlns-sim {quickstart,run,sweep,report,archive,verify}``.

    fedlns-sim quickstart                                  # clean, attacked, FedLNS and oracle per family
    fedlns-sim sweep --preset cpu --jobs 2 --out runs/cpu --report results/cpu
    fedlns-sim run --preset paper --family bert --method flame --set malicious_fraction=0.2 --device cuda
    fedlns-sim report runs/cpu --out results/cpu
    fedlns-sim archive runs/cpu docs/results/cpu           # finished runs into runs.tar.xz, cells to verify
    fedlns-sim verify docs/results/cpu                     # re-run those cells, compare number for number

Errors in what you typed (an unknown config key, a wrong type, a missing data folder, no finished runs) are one
line on stderr and exit status 2; set FEDLNS_SIM_DEBUG=1 to see the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .config import (
    ATTACK_NAMES,
    COMPARED,
    FAMILIES,
    METHODS,
    PAPER_FRACTIONS,
    PAPER_SEEDS,
    PARTITIONS,
    PRESETS,
    parse_override,
)

# What ``sweep`` runs by default for each preset.
SWEEP_DEFAULTS = {
    "paper": dict(
        families=FAMILIES, partitions=PARTITIONS, fractions=PAPER_FRACTIONS, methods=METHODS, seeds=PAPER_SEEDS
    ),
    "cpu": dict(
        families=FAMILIES, partitions=PARTITIONS, fractions=(0.4,), methods=COMPARED, seeds=(100, 200, 300, 400, 500)
    ),
    "quick": dict(families=FAMILIES, partitions=("iid",), fractions=(0.4,), methods=COMPARED, seeds=(100,)),
    "smoke": dict(families=FAMILIES, partitions=("iid",), fractions=(0.4,), methods=METHODS, seeds=(100,)),
    "lora": dict(families=("gpt",), partitions=PARTITIONS, fractions=(0.4,), methods=COMPARED, seeds=(100, 200, 300)),
}
# The quickstart: per family, FedAvg without and with attackers, FedLNS with them, and the oracle.
QUICKSTART_CELLS = (("fedavg", 0.0), ("fedavg", 0.4), ("fedlns", 0.4), ("fedlns_default", 0.4), ("oracle", 0.4))


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the description's layout and show every option's default (the ones that are not None or False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            action.default not in (None, False, [], argparse.SUPPRESS)
            and "(default" not in text
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


def _csv(kind, choices=None):
    def parse(text):
        values = tuple(kind(x) for x in text.split(",") if x)
        unknown = [v for v in values if choices is not None and v not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown[0]!r}; choose from {', '.join(map(str, choices))}")
        if not values:
            raise argparse.ArgumentTypeError("an empty list")
        return values

    parse.__name__ = f"comma-separated {kind.__name__}"  # argparse names the type in its error messages
    return parse


def _overrides(args) -> dict:
    values = dict(parse_override(text) for text in args.set)
    if args.data is not None:
        values["data"] = args.data
    if args.device is not None:
        values["device"] = args.device
    return values


def _common(parser):
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="settings to start from")
    parser.add_argument(
        "--data",
        default=None,
        help="data folder, or 'synthetic' (default: $FEDLNS_DATA, else "
        "../shared/data if it exists, else the synthetic corpus)",
    )
    parser.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"), help="default: the preset's (auto)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any Config field; repeat for several (unknown keys and wrong types are errors)",
    )
    parser.add_argument("--out", default=None, help="runs folder (default: runs/<preset>)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedlns-sim", description=__doc__, formatter_class=_Formatter)
    commands = parser.add_subparsers(dest="command", required=True)

    quick = commands.add_parser(
        "quickstart",
        formatter_class=_Formatter,
        help="clean FedAvg, FedAvg and FedLNS at 40%% malicious, and the oracle, per family",
    )
    quick.add_argument("--data", default=None, help="data folder, or 'synthetic' (default as for run)")
    quick.add_argument("--family", choices=(*FAMILIES, "all"), default="all", help="model family to compare")
    quick.add_argument("--out", default="runs/quickstart", help="runs folder (finished runs are reused)")
    quick.add_argument("--jobs", type=int, default=2, help="runs at once")
    quick.add_argument("--no-progress", action="store_true", help="no progress bars")

    one = commands.add_parser("run", formatter_class=_Formatter, help="one run (resumes if its folder has state)")
    _common(one)
    one.add_argument("--family", choices=FAMILIES, default="gpt", help="model family")
    one.add_argument("--method", choices=METHODS, default="fedlns", help="server method")

    many = commands.add_parser(
        "sweep",
        formatter_class=_Formatter,
        help="families x partitions x fractions x methods x seeds; skips finished runs",
    )
    _common(many)
    many.add_argument("--families", type=_csv(str, FAMILIES), help="comma-separated (default: the preset's)")
    many.add_argument("--partitions", type=_csv(str, PARTITIONS), help="comma-separated (default: the preset's)")
    many.add_argument(
        "--fractions",
        type=_csv(float),
        help="comma-separated malicious fractions, e.g. 0,0.2,0.4 (default: the preset's)",
    )
    many.add_argument("--methods", type=_csv(str, METHODS), help="comma-separated (default: the preset's)")
    many.add_argument("--seeds", type=_csv(int), help="comma-separated (default: the preset's)")
    many.add_argument(
        "--attacks",
        type=_csv(str, ATTACK_NAMES),
        help="comma-separated attacks (default: the config's, target_corruption)",
    )
    many.add_argument(
        "--coverages",
        type=_csv(float),
        help="comma-separated activation coverages M_act/K (bank ablation; default: the preset's 0.5)",
    )
    many.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at once, each in its own process (with --ray local: the CPUs of the local Ray instance)",
    )
    many.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run each run as a Ray task: on a Ray instance started here for the sweep (no ADDRESS), "
        "or on the running cluster at ADDRESS (e.g. 127.0.0.1:6379, ray://head:10001); OUT must be "
        "visible to every node",
    )
    many.add_argument("--ray-cpus", type=float, default=1.0, help="CPUs each run asks Ray for")
    many.add_argument(
        "--ray-gpus",
        type=float,
        default=0.0,
        help="GPUs each run asks Ray for; a fraction shares a GPU (0.25: four runs per GPU)",
    )
    many.add_argument(
        "--no-references",
        action="store_true",
        help="skip the reference runs otherwise added: clean FedAvg (0%% malicious) per seed and the "
        "oracle at each attacked fraction",
    )
    many.add_argument("--report", default=None, help="write tables and plots here afterwards")

    report = commands.add_parser(
        "report", formatter_class=_Formatter, help="tables (Markdown, LaTeX, CSV) and SVG plots from run files"
    )
    report.add_argument("runs", help="folder of run folders, an archive (runs.tar.xz) or a results folder holding one")
    report.add_argument("--out", required=True, help="folder for the tables and plots")
    report.add_argument("--no-plots", action="store_true", help="tables only")
    report.add_argument(
        "--allow-mixed-code",
        action="store_true",
        help="put runs made by different code into one report (refused by default)",
    )

    archive = commands.add_parser(
        "archive",
        formatter_class=_Formatter,
        help="add every finished run's config and rounds to a results folder's archive",
    )
    archive.add_argument("runs", help="folder of run folders (or an archive, or a results folder holding one)")
    archive.add_argument(
        "dest",
        help="results folder (runs go into DEST/runs.tar.xz beside the runs it holds, the "
        "cells to verify to DEST/verify.txt)",
    )
    archive.add_argument(
        "--verify-cells",
        default=None,
        type=_csv(str),
        help="comma-separated run names to list in verify.txt (default: per family, FedLNS at the "
        "largest fraction, IID, the first seed)",
    )

    verify = commands.add_parser(
        "verify",
        formatter_class=_Formatter,
        help="re-run the cells a results folder names and compare them number for number",
    )
    verify.add_argument(
        "results",
        help="results folder made by `archive` (holds runs.tar.xz, or runs/ in the older layout, and verify.txt)",
    )
    verify.add_argument(
        "--run",
        action="append",
        default=None,
        metavar="NAME",
        help="verify this archived run instead of verify.txt's cells; repeat for several",
    )
    verify.add_argument("--data", default=None, help="data folder (default as for run)")
    verify.add_argument("--out", default=None, help="where the re-runs go (default: a temporary folder)")
    verify.add_argument("--jobs", type=int, default=2, help="runs at once")
    verify.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="also accept a cell whose best and last-10 perplexity agree within this relative "
        "tolerance (for a machine with another instruction set than the archive's, where "
        "numbers cannot agree to the bit); default: exact only",
    )
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except (KeyError, TypeError, ValueError, FileNotFoundError, RuntimeError) as error:
        if os.environ.get("FEDLNS_SIM_DEBUG"):
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"fedlns-sim {args.command}: error: {message}", file=sys.stderr)
        return 2


def _dispatch(args) -> int:
    if args.command == "report":
        return _report(args.runs, args.out, not args.no_plots, args.allow_mixed_code)
    if args.command == "quickstart":
        return quickstart(args.data, args.out, not args.no_progress, args.family, args.jobs)
    if args.command == "archive":
        from .archive import archive

        result = archive(args.runs, args.dest, args.verify_cells)
        print(
            f"archived {result['runs']} runs into {Path(args.dest) / 'runs.tar.xz'} ({result['archived']} in all); "
            f"cells to verify: {', '.join(result['cells'])}"
        )
        return 0
    if args.command == "verify":
        from .archive import verify

        return verify(args.results, args.run, args.data, args.out, args.jobs, args.rtol)

    overrides = _overrides(args)
    out = Path(args.out or f"runs/{args.preset}")
    if args.command == "run":
        from .config import make_config
        from .run import run

        print(
            run(
                make_config(args.preset, args.family, method=args.method, **overrides),
                out,
                progress=not args.no_progress,
            )
        )
        return 0

    from .sweep import sweep, sweep_configs

    axes = dict(SWEEP_DEFAULTS[args.preset])
    for name in ("families", "partitions", "fractions", "methods", "seeds"):
        if getattr(args, name):
            axes[name] = getattr(args, name)
    configs = sweep_configs(
        args.preset,
        activation_coverages=args.coverages or (None,),
        attacks=args.attacks or (None,),
        references=not args.no_references,
        **axes,
        **overrides,
    )
    tic = time.perf_counter()
    summary = sweep(
        configs,
        out,
        progress=not args.no_progress,
        jobs=args.jobs,
        ray=args.ray,
        cpus_per_run=args.ray_cpus,
        gpus_per_run=args.ray_gpus,
    )
    print(
        f"sweep: {summary['ran']} ran, {summary['skipped']} already finished, {len(summary['failed'])} failed "
        f"in {time.perf_counter() - tic:.0f} s -> {out}"
    )
    for name in summary["failed"]:
        print(f"  failed: {name} (see {out / 'failed' / (name + '.txt')})")
    if args.report:
        _report(out, args.report, True)
    return 1 if summary["failed"] else 0


def _report(runs, out, plots, allow_mixed_code=False) -> int:
    from .report import write_report

    result = write_report(runs, out, plots=plots, allow_mixed_code=allow_mixed_code)
    print(f"tables: {result['tables']} ({len(result['summaries'])} finished runs)")
    if result["left_out"]:
        print(f"left out (unfinished or without records): {', '.join(result['left_out'])}")
    for path in result["plots"]:
        print(f"plot:   {path}")
    return 0


def quickstart(data=None, out="runs/quickstart", progress=True, family="all", jobs=2) -> int:
    """Per family: FedAvg with no attacker, FedAvg, the paper's FedLNS and FedLNS's default with 40%
    target-corrupting clients, and the oracle (FedAvg over the benign clients only), IID, seed 100, in the ``quick``
    preset; prints what they show."""
    from .data import resolve_data_dir
    from .report import write_report
    from .sweep import sweep, sweep_configs

    data_dir = resolve_data_dir(data or "")
    families = FAMILIES if family == "all" else (family,)
    print(f"data: {data_dir if data_dir else 'synthetic corpus (no data folder found)'}")
    extra = {"data": str(data_dir)} if data_dir is not None else {"data": "synthetic", "vocab_size": 512}
    configs = sweep_configs(
        "quick", families, ("iid",), (0.4,), ("fedavg", "fedlns", "fedlns_default"), (100,), references=True, **extra
    )
    tic = time.perf_counter()
    summary = sweep(configs, out, progress=progress, jobs=jobs)
    result = write_report(out, Path(out) / "report")
    by_cell = {(s["family"], s["method"], s["fraction"]): s for s in result["summaries"]}
    print(f"\n{'model':>6} {'run':<28} {'best ppl':>9} {'last 10':>9} {'TPR':>6} {'FPR':>6}")
    for name in families:
        for method, fraction in QUICKSTART_CELLS:
            s = by_cell.get((name, method, fraction))
            if s is None:
                continue
            label = {"fedavg": "FedAvg", "fedlns": "FedLNS (paper)", "fedlns_default": "FedLNS()", "oracle": "Oracle"}[
                method
            ]
            detection = f"{s['tpr']:>6.2f} {s['fpr']:>6.2f}" if method.startswith("fedlns") else f"{'':>6} {'':>6}"
            print(
                f"{name:>6} {label + f' at {fraction * 100:g}%':<28} {s['perplexity']:>9.1f} "
                f"{s['last10_perplexity']:>9.1f} {detection}"
            )
        unigram = by_cell.get((name, "fedavg", 0.0), {}).get("unigram_perplexity")
        if unigram:
            print(f"{name:>6} {'Unigram model':<28} {unigram:>9.1f}")
    print(
        f"\nplots: {', '.join(str(p) for p in result['plots'])}\nall tables: {result['tables']}\n"
        f"({summary['ran']} runs in {time.perf_counter() - tic:.0f} s; finished runs are reused)"
    )
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
