"""Command line: ``fedlns-sim {run,sweep,report,quickstart}``.

    fedlns-sim quickstart                                  # FedAvg vs FedLNS, 40% malicious, a few minutes
    fedlns-sim sweep --preset cpu --out runs/cpu --report docs/results/cpu
    fedlns-sim run --preset paper --family bert --method flame --set malicious_fraction=0.2 --device cuda
    fedlns-sim report runs/cpu --out docs/results/cpu
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import FAMILIES, METHODS, PAPER_FRACTIONS, PAPER_SEEDS, PARTITIONS, PRESETS, parse_override

SEVEN = tuple(m for m in METHODS if m != "fedlns_two")
# What ``sweep`` runs by default for each preset.
SWEEP_DEFAULTS = {
    "paper": dict(families=FAMILIES, partitions=PARTITIONS, fractions=PAPER_FRACTIONS, methods=METHODS,
                  seeds=PAPER_SEEDS),
    "cpu": dict(families=FAMILIES, partitions=PARTITIONS, fractions=(0.4,), methods=SEVEN, seeds=(100,)),
    "smoke": dict(families=FAMILIES, partitions=("iid",), fractions=(0.4,), methods=METHODS, seeds=(100,)),
}


def _csv(kind):
    def parse(text):
        return tuple(kind(x) for x in text.split(",") if x)
    return parse


def _overrides(args) -> dict:
    values = dict(parse_override(text) for text in args.set)
    if args.data is not None:
        values["data"] = args.data
    if args.device is not None:
        values["device"] = args.device
    return values


def _common(parser):
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--data", default=None, help="data folder (default: $FEDLNS_DATA, ../shared/data, else "
                                                     "a synthetic corpus)")
    parser.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override any Config field (unknown keys and wrong types are errors)")
    parser.add_argument("--out", default=None, help="runs folder (default: runs/<preset>)")
    parser.add_argument("--no-progress", action="store_true")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fedlns-sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    one = commands.add_parser("run", help="one run (resumes if its folder has state)")
    _common(one)
    one.add_argument("--family", choices=FAMILIES, default="gpt")
    one.add_argument("--method", choices=METHODS, default="fedlns")

    many = commands.add_parser("sweep", help="families x partitions x fractions x methods x seeds; skips finished")
    _common(many)
    many.add_argument("--families", type=_csv(str))
    many.add_argument("--partitions", type=_csv(str))
    many.add_argument("--fractions", type=_csv(float))
    many.add_argument("--methods", type=_csv(str))
    many.add_argument("--seeds", type=_csv(int))
    many.add_argument("--coverages", type=_csv(float), help="activation coverages M_act/K (bank ablation)")
    many.add_argument("--report", default=None, help="write tables and plots here afterwards")

    report = commands.add_parser("report", help="tables (Markdown, LaTeX, CSV) and PNG plots from run files")
    report.add_argument("runs")
    report.add_argument("--out", required=True)
    report.add_argument("--no-plots", action="store_true")

    quick = commands.add_parser("quickstart", help="FedAvg vs FedLNS at 40%% malicious in a few minutes")
    quick.add_argument("--data", default=None)
    quick.add_argument("--family", choices=(*FAMILIES, "all"), default="all",
                       help="model family to compare (default: all three, about 3 minutes on 2 idle cores)")
    quick.add_argument("--out", default="runs/quickstart")
    quick.add_argument("--no-progress", action="store_true")

    args = parser.parse_args(argv)
    if args.command == "report":
        return _report(args.runs, args.out, not args.no_plots)
    if args.command == "quickstart":
        return quickstart(args.data, args.out, not args.no_progress, args.family)

    overrides = _overrides(args)
    out = Path(args.out or f"runs/{args.preset}")
    if args.command == "run":
        from .config import make_config
        from .run import run

        path = run(make_config(args.preset, args.family, method=args.method, **overrides), out,
                   progress=not args.no_progress)
        print(path)
        return 0

    from .sweep import sweep, sweep_configs

    axes = dict(SWEEP_DEFAULTS[args.preset])
    for name in ("families", "partitions", "fractions", "methods", "seeds"):
        if getattr(args, name):
            axes[name] = getattr(args, name)
    configs = sweep_configs(args.preset, activation_coverages=args.coverages or (None,), **axes, **overrides)
    tic = time.perf_counter()
    summary = sweep(configs, out, progress=not args.no_progress)
    print(f"sweep: {summary['ran']} ran, {summary['skipped']} already finished, {len(summary['failed'])} failed "
          f"in {time.perf_counter() - tic:.0f} s -> {out}")
    for name in summary["failed"]:
        print(f"  failed: {name} (see {out / name / 'error.txt'})")
    if args.report:
        _report(out, args.report, True)
    return 1 if summary["failed"] else 0


def _report(runs, out, plots) -> int:
    from .report import write_report

    result = write_report(runs, out, plots=plots)
    print(f"tables: {result['tables']}")
    for path in result["plots"]:
        print(f"plot:   {path}")
    return 0


def quickstart(data=None, out="runs/quickstart", progress=True, family="all") -> int:
    """FedAvg vs FedLNS, IID, 40% malicious, CPU preset, each family (or one); prints tables and the plot's path."""
    from .data import resolve_data_dir
    from .report import to_markdown, write_report
    from .sweep import sweep, sweep_configs

    data_dir = resolve_data_dir(data or "")
    families = tuple(FAMILIES) if family == "all" else (family,)
    print(f"data: {data_dir if data_dir else 'synthetic corpus (no data folder found)'}")
    if data_dir is not None:
        configs = sweep_configs("cpu", families, ("iid",), (0.4,), ("fedavg", "fedlns"), (100,), data=str(data_dir))
    else:   # the synthetic corpus is small: a smaller vocabulary and fewer blocks than the cpu preset's 800
        configs = sweep_configs("cpu", families, ("iid",), (0.4,), ("fedavg", "fedlns"), (100,), data="synthetic",
                                vocab_size=512, max_train_blocks=600)
    tic = time.perf_counter()
    summary = sweep(configs, out, progress=progress)
    result = write_report(out, Path(out) / "report")
    for table in result["table_objects"]:
        if table["metric"] == "perplexity":
            print()
            print(to_markdown(table))
    for s in result["summaries"]:
        print(f"{s['family']:>5} {s['method']:>7}: perplexity {s['initial_perplexity']:.0f} at start -> {s['perplexity']:.1f} "
              f"at best round {s['best_round']}; rejected malicious (TPR) {s['tpr']:.2f}, benign (FPR) {s['fpr']:.2f}")
    print(f"\nplot: {result['plots'][0]}\nall tables: {result['tables']}\n"
          f"({summary['ran']} runs in {time.perf_counter() - tic:.0f} s; finished runs are reused)")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
