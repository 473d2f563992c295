"""``fedlns-demo``: screen synthetic rounds with attackers and print what FedLNS decided and why."""

from __future__ import annotations

import argparse

from ._screening import FedLNS
from ._synthetic import SyntheticFederation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedlns-demo", description=__doc__)
    parser.add_argument("--clients", type=int, default=100, help="population size K (default 100)")
    parser.add_argument("--malicious", type=float, default=0.4, help="malicious fraction (default 0.4)")
    parser.add_argument("--participation", type=float, default=0.1, help="fraction sampled per round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds to run (default 15)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 0 <= args.malicious < 1 or not 0 < args.participation <= 1 or args.clients < 2 or args.rounds < 1:
        parser.error("need clients >= 2, rounds >= 1, 0 <= malicious < 1 and 0 < participation <= 1")

    federation = SyntheticFederation(args.clients, args.malicious, n_layers=4, width=64, seed=args.seed)
    screener = FedLNS(activation_threshold=args.clients // 2, random_state=args.seed)
    print(
        f"{args.clients} clients, {len(federation.malicious)} malicious, {args.participation:.0%} per round; "
        f"signature D={federation.dimension}; screening starts at {screener.activation_threshold} "
        "clients in the bank\n"
    )
    caught = missed = wrongly = 0
    for round_index in range(args.rounds):
        models, counts = federation.sample_round(round_index, args.participation)
        result = screener.screen(federation.global_params, models, counts)
        result.aggregate(federation.global_params, models)
        print(result.explain())
        attackers = {client_id for client_id in models if client_id in federation.malicious}
        if result.active:
            rejected = set(result.rejected)
            caught += len(attackers & rejected)
            missed += len(attackers - rejected)
            wrongly += len(rejected - attackers)
            print(f"  truth: attackers {sorted(attackers) or '-'}")
    print(
        f"\nactive rounds: {caught} attacker updates rejected, {missed} let through, {wrongly} benign updates rejected"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
