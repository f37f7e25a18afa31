"""`gpu-binder replay NODES.csv PODS.csv`: placement policies side by side on a trace."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from gpu_binder.replay import generate
from gpu_binder.replay.order import Order, orders_from_pods
from gpu_binder.replay.policy import RunFactory
from gpu_binder.replay.registry import BINDER, policies
from gpu_binder.replay.report import FIRST_SEED, JSON, Mode, replay
from gpu_binder.replay.sweep import DrawResult, sweep
from gpu_binder.replay.trace import Node, TraceError, load_nodes, load_pods

# The node list generated clusters are cut from when none is given: the shipped trace's.
SHIPPED_NODES = (
    Path(__file__).resolve().parents[3]
    / "data"
    / "alibaba-gpu-v2023"
    / "openb_node_list_gpu_node.csv"
)
SWEEP_SEEDS = 2


def build_parser() -> argparse.ArgumentParser:
    known = policies()
    parser = argparse.ArgumentParser(
        prog="gpu-binder replay",
        description="Replay a GPU cluster trace under several placement policies.",
    )
    parser.add_argument(
        "nodes",
        type=Path,
        nargs="?",
        metavar="NODES.csv",
        help="node list of the trace (with --generate/--sweep: the list clusters are cut "
        "from; default the shipped Alibaba list)",
    )
    parser.add_argument(
        "pods", type=Path, nargs="?", metavar="PODS.csv", help="pod list of the trace"
    )
    parser.add_argument(
        "--generate",
        type=int,
        metavar="DRAW",
        help="replay generated workload DRAW (replay.generate) instead of a pod list",
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="DIR",
        help="with --generate: write the draw's nodes.csv, pods.csv (its first seed's "
        "arrivals) and params.json into DIR, and replay nothing",
    )
    parser.add_argument(
        "--sweep",
        type=int,
        metavar="N",
        help="run N generated draws (from --draw-base) with the binder and the baselines "
        "and print the distribution of binder minus best baseline (arrival mode)",
    )
    parser.add_argument(
        "--draw-base", type=int, default=0, metavar="DRAW", help="first draw of --sweep"
    )
    parser.add_argument(
        "--confirm",
        type=int,
        default=0,
        metavar="K",
        help="with --sweep: run the K draws furthest behind again on further seeds and "
        "report them over all their seeds (their gaps were picked as the largest)",
    )
    parser.add_argument(
        "--confirm-seeds",
        type=int,
        metavar="S",
        help="with --confirm: the further seeds per draw (default 3 × --seeds)",
    )
    parser.add_argument(
        "--policies",
        default=",".join(known),
        help=f"comma-separated, from {', '.join(known)} (default: all)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        help=f"seeds 42, 43, … (default 10; {SWEEP_SEEDS} per draw with --sweep)",
    )
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
    if args.seeds is None:
        args.seeds = SWEEP_SEEDS if args.sweep is not None else 10
    if args.seeds < 1:
        print("gpu-binder replay: --seeds must be at least 1", file=sys.stderr)
        return 2
    if (args.load is not None and args.load <= 0) or args.stopped < 0:
        print("gpu-binder replay: --load must be positive, --stopped not negative", file=sys.stderr)
        return 2
    contenders = {name: known[name] for name in chosen}
    if args.generate is not None or args.sweep is not None:
        return _generated(args, contenders)
    if args.nodes is None or args.pods is None:
        parser.print_usage(sys.stderr)
        print("gpu-binder replay: NODES.csv and PODS.csv are needed", file=sys.stderr)
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
    return _print_replay(
        args,
        trace=args.pods.stem,
        nodes=nodes,
        orders=orders,
        contenders=contenders,
    )


def _print_replay(
    args: argparse.Namespace,
    trace: str,
    nodes: Sequence[Node],
    orders: Sequence[Order],
    contenders: dict[str, RunFactory],
    draw: Callable[[int], Sequence[Order]] | None = None,
) -> int:
    started = time.perf_counter()
    result = replay(
        trace=trace,
        nodes=nodes,
        orders=orders,
        policies=contenders,
        seeds=args.seeds,
        mode=cast(Mode, args.mode),
        curves=args.curves or args.plot is not None,
        load=args.load,
        stopped_s=args.stopped,
        draws=args.arrivals,
        first_seed=args.seed_base,
        draw=draw,
    )
    if args.plot is not None and args.mode == "arrival":
        from gpu_binder.replay.plot import plot_curves

        plot_curves(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result, time.perf_counter() - started))
    return 0


def _generated(args: argparse.Namespace, contenders: dict[str, RunFactory]) -> int:
    """--generate DRAW (replay it, or --write it) and --sweep N."""
    try:
        base = load_nodes(args.nodes or SHIPPED_NODES)
    except TraceError as err:
        print(
            f"gpu-binder replay: {err} (give the NODES.csv to cut clusters from)", file=sys.stderr
        )
        return 2
    if args.sweep is not None:
        if args.sweep < 1 or BINDER not in contenders or len(contenders) < 2:
            print(
                "gpu-binder replay: --sweep needs N >= 1, the binder and a baseline",
                file=sys.stderr,
            )
            return 2
        confirm_seeds = 3 * args.seeds if args.confirm_seeds is None else args.confirm_seeds
        if args.confirm < 0 or confirm_seeds < 1:
            print(
                "gpu-binder replay: --confirm must not be negative, --confirm-seeds at least 1",
                file=sys.stderr,
            )
            return 2

        def progress(r: DrawResult) -> None:
            name, best = r.best_baseline
            print(
                f"draw {r.draw} ({r.cluster}, {r.capacity_gpus} GPUs, {r.seeds} seeds): binder "
                f"{r.unallocated[BINDER]:.3f} {name} {best:.3f} bound {r.bound:.3f} "
                f"({r.seconds:.0f} s)",
                file=sys.stderr,
            )

        draws = range(args.draw_base, args.draw_base + args.sweep)
        result = sweep(
            draws,
            base,
            contenders,
            seeds=args.seeds,
            progress=progress,
            confirm=args.confirm,
            confirm_seeds=confirm_seeds,
        )
        print(json.dumps(result, indent=2) if args.json else render_sweep(result))
        return 0
    params = generate.draw_params(args.generate)
    nodes = generate.build_nodes(params, base)
    if args.write is not None:
        generate.write(
            params, nodes, generate.draw_arrivals(params, nodes, args.seed_base), args.write
        )
        print(f"draw {args.generate}: {args.write}/nodes.csv, pods.csv, params.json")
        return 0
    return _print_replay(
        args,
        trace=f"draw{args.generate}",
        nodes=nodes,
        orders=(),
        contenders=contenders,
        draw=lambda seed: generate.draw_arrivals(params, nodes, seed),
    )


def render_sweep(result: JSON) -> str:
    """A sweep's distributions and worst draws, for people."""
    summary = cast(dict[str, object], result["summary"])
    lines = [f"{result['seeds_per_draw']} seeds per draw"]
    for name, value in summary.items():
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            lines.append(f"{name}:")
            lines.extend(f"  {k}: {_figures(v)}" for k, v in value.items())
        elif isinstance(value, dict):
            lines.append(f"{name}: {_figures(value)}")
        else:
            lines.append(f"{name}: {value}")
    rows = cast(list[dict[str, object]], result["draws"])
    lines.append(
        f"{'draw':>6} {'cluster':<10} {'GPUs':>6} {'seeds':>5} {'binder':>8} {'best':>8} "
        f"{'gap':>7} {'se':>6}"
    )
    for row in sorted(rows, key=lambda r: -cast(float, r["binder_minus_best"]))[:10]:
        se = row["binder_minus_best_se"]
        lines.append(
            f"{row['draw']:>6} {row['cluster']:<10} {row['capacity_gpus']:>6} {row['seeds']:>5} "
            f"{cast(float, row['binder']):>8.3f} "
            f"{cast(float, row['best_baseline_unallocated_gpu_pct']):>8.3f} "
            f"{cast(float, row['binder_minus_best']):>7.3f} "
            + (f"{se:>6.3f}" if isinstance(se, float) else f"{'-':>6}")
        )
    return "\n".join(lines)


def _figures(values: dict[str, object]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in values.items() if isinstance(v, int | float))


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
