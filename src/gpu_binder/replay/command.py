"""`gpu-binder replay NODES.csv PODS.csv`: placement policies side by side on a trace."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from gpu_binder.replay.order import orders_from_pods
from gpu_binder.replay.registry import policies
from gpu_binder.replay.report import FIRST_SEED, JSON, Mode, replay
from gpu_binder.replay.trace import TraceError, load_nodes, load_pods


def build_parser() -> argparse.ArgumentParser:
    known = policies()
    parser = argparse.ArgumentParser(
        prog="gpu-binder replay",
        description="Replay a GPU cluster trace under several placement policies.",
    )
    parser.add_argument("nodes", type=Path, metavar="NODES.csv", help="node list of the trace")
    parser.add_argument("pods", type=Path, metavar="PODS.csv", help="pod list of the trace")
    parser.add_argument(
        "--policies",
        default=",".join(known),
        help=f"comma-separated, from {', '.join(known)} (default: all)",
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds 42, 43, … (default 10)")
    parser.add_argument(
        "--seed-base",
        type=int,
        default=FIRST_SEED,
        metavar="SEED",
        help=f"the first seed (default {FIRST_SEED}), to check a result on other draws",
    )
    parser.add_argument("--mode", choices=("arrival", "timeline"), default="arrival")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--curves", action="store_true", help="add unallocated GPUs per arrived load (arrival)"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="draw unallocated GPUs versus arrived load per policy (arrival; needs matplotlib)",
    )
    parser.add_argument(
        "--load",
        type=float,
        help="timeline: the trace's orders redrawn as a Poisson stream offering LOAD × capacity",
    )
    parser.add_argument(
        "--arrivals",
        type=int,
        default=0,
        help="timeline with --load: orders drawn per seed (default 3 × the trace's)",
    )
    parser.add_argument(
        "--stopped",
        type=int,
        default=0,
        metavar="SECONDS",
        help="timeline: a VM stays stopped this long after its run, keeping its GPUs",
    )
    parser.add_argument(
        "--no-defrag", action="store_true", help="the binder without its defragmentation step"
    )
    parser.add_argument(
        "--online",
        action="store_true",
        help="arrival: create each order's VM only as it arrives (default: every order of "
        "the run is a VM up front, a backlog the binder places in arrival order)",
    )
    return parser


def main_replay(argv: Sequence[str]) -> int:
    """Run the replay; 0 on success, 2 on a usage or trace error."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    known = policies(defrag=not args.no_defrag, backlog=not args.online)
    chosen = [name.strip() for name in str(args.policies).split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        print(
            f"gpu-binder replay: unknown policy {', '.join(unknown) or '(none)'}; "
            f"known: {', '.join(known)}",
            file=sys.stderr,
        )
        return 2
    if args.seeds < 1:
        print("gpu-binder replay: --seeds must be at least 1", file=sys.stderr)
        return 2
    if (args.load is not None and args.load <= 0) or args.stopped < 0:
        print("gpu-binder replay: --load must be positive, --stopped not negative", file=sys.stderr)
        return 2
    try:
        nodes = load_nodes(args.nodes)
        orders = orders_from_pods(load_pods(args.pods))
    except TraceError as err:
        print(f"gpu-binder replay: {err}", file=sys.stderr)
        return 2
    if not orders:
        print(f"gpu-binder replay: {args.pods}: no pod asks for a GPU", file=sys.stderr)
        return 2
    started = time.perf_counter()
    result = replay(
        trace=args.pods.stem,
        nodes=nodes,
        orders=orders,
        policies={name: known[name] for name in chosen},
        seeds=args.seeds,
        mode=cast(Mode, args.mode),
        curves=args.curves or args.plot is not None,
        load=args.load,
        stopped_s=args.stopped,
        draws=args.arrivals,
        first_seed=args.seed_base,
    )
    if args.plot is not None and args.mode == "arrival":
        from gpu_binder.replay.plot import plot_curves

        plot_curves(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result, time.perf_counter() - started))
    return 0


def render(result: JSON, seconds: float) -> str:
    """The result as a table for people."""
    bound = result["bound_unallocated_gpu_pct"]
    fit_bound = result.get("bound_fit_unallocated_gpu_pct")
    lines = [
        f"trace {result['trace']}, {result['mode']} mode, {result['seeds']} seeds"
        + (f" from {result['first_seed']}" if "first_seed" in result else "")
        + ", "
        f"{result['capacity_gpus']} GPUs; "
        + (f"bound {bound:.3f}% unallocated" if isinstance(bound, float) else "no bound")
        + (
            f" ({fit_bound:.3f}% with orders that fit no node unservable)"
            if isinstance(fit_bound, float)
            else ""
        ),
        f"{'policy':<20} {'unallocated %':>13} {'rejected':>9} {'seconds':>8}",
    ]
    table = cast(dict[str, dict[str, float]], result["policies"])
    for name, row in table.items():
        lines.append(
            f"{name:<20} {row['unallocated_gpu_pct']:>13.3f} {row['rejected_orders']:>9.1f} "
            f"{row['seconds']:>8.1f}"
        )
    lines.append(f"total {seconds:.1f} s")
    return "\n".join(lines)
