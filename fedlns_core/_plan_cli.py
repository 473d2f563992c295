"""``fedlns-plan``: choose FedLNS's activation threshold for a federation (appendix ``app:min_bank_probability``)."""

from __future__ import annotations

import argparse
import sys

from ._plan import DEFAULT_COVERAGES, plan_activation

# plan_activation's parameter names as this command spells them, for its error messages
_FLAGS = {
    "num_clients": "--clients",
    "malicious_fraction": "--malicious",
    "participation": "--participation",
    "max_risk": "--max-risk",
    "each coverage": "each --coverage",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit code 2, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fedlns-plan",
        description="Smallest history-bank size at which the exact (hypergeometric) probability that "
        "malicious ids make up at least half of the bank is at most --max-risk, at that size "
        "and every larger one, and the rounds the bank needs to reach it, assuming uniform "
        "random participation. Use the threshold as FedLNS(activation_threshold=...).",
    )
    parser.add_argument("--clients", type=int, required=True, help="population size K")
    parser.add_argument(
        "--malicious", type=float, required=True, help="assumed upper bound on the malicious fraction, in [0, 0.5)"
    )
    rate = parser.add_mutually_exclusive_group(required=True)
    rate.add_argument("--participation", type=float, help="fraction of the clients sampled per round, in (0, 1]")
    rate.add_argument("--per-round", type=int, help="clients sampled per round (instead of --participation)")
    parser.add_argument(
        "--max-risk",
        type=float,
        default=0.01,
        help="accepted probability of a malicious-majority bank, in (0, 1) (default %(default)s)",
    )
    parser.add_argument(
        "--coverage",
        type=float,
        nargs="+",
        default=list(DEFAULT_COVERAGES),
        metavar="RHO",
        help="bank coverages (fractions of K) for the table (default 0.1 0.2 ... 1.0)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print the plan and a table of risk and expected rounds against coverage; 2 on bad input."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        participation = args.participation
        if args.per_round is not None and args.clients >= 1:
            if not 1 <= args.per_round <= args.clients:
                raise ValueError(f"--per-round must be between 1 and --clients={args.clients}, got {args.per_round}")
            participation = args.per_round / args.clients
        elif args.per_round is not None:
            participation = 1.0  # plan_activation reports the bad --clients
        plan = plan_activation(args.clients, args.malicious, participation, args.max_risk)
        rows = plan.table(args.coverage)
    except (TypeError, ValueError) as error:
        message = str(error)
        for name, flag in _FLAGS.items():
            message = message.replace(name, flag)
        parser.error(message)
    print(plan.describe())
    if args.per_round is not None:
        risk = "" if args.max_risk == 0.01 else f", max_risk={args.max_risk:g}"
        print(
            f"screener: FedLNS.for_federation({args.clients}, {args.per_round}, {args.malicious:g}{risk}) "
            "(this threshold with the default rule; FedLNS.paper(**rule_for_round_size(per_round)) for the "
            "paper-family rule measured for that round size, docs/rules.md)"
        )
    print()
    print(f"{'coverage':>8}  {'bank size':>9}  {'P(malicious-majority bank)':>26}  {'expected rounds':>15}")
    for row in rows:
        rounds = "never" if row.expected_rounds is None else str(row.expected_rounds)
        print(f"{row.coverage:>8.0%}  {row.bank_size:>9d}  {row.risk:>26.3g}  {rounds:>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
