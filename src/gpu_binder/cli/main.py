"""Entry point of the `gpu-binder` command: one subcommand per way to run it (DESIGN §6)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence

# Subcommands that own their flags: their module's main function gets the rest of argv.
DELEGATED: dict[str, tuple[str, str]] = {
    "agent": ("gpu_binder.agent.command", "main_agent"),
    # `kubectl gpu`'s subcommands, for a machine with no kubectl (the chart's helm test).
    "check": ("gpu_binder.kubectl.command", "main_kubectl"),
    "drain": ("gpu_binder.kubectl.command", "main_kubectl"),
    "status": ("gpu_binder.kubectl.command", "main_kubectl"),
    "vm": ("gpu_binder.kubectl.command", "main_kubectl"),
    "why": ("gpu_binder.kubectl.command", "main_kubectl"),
    "replay": ("gpu_binder.replay.command", "main_replay"),
    "run": ("gpu_binder.kube.command", "main_run"),
    "sim": ("gpu_binder.sim.command", "main_sim_cli"),
    "usage": ("gpu_binder.usage.command", "main_usage"),
}


def _delegate(name: str, argv: Sequence[str]) -> int:
    module, func = DELEGATED[name]
    try:
        entry: Callable[[list[str]], int] = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError):
        print(f"gpu-binder {name}: not available in this build", file=sys.stderr)
        return 2
    # kubectl gpu's entry takes its subcommand as the first argument.
    return entry([name, *argv] if module == "gpu_binder.kubectl.command" else list(argv))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-binder", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="the embedded cluster playing a scenario that shows every rule"
    )
    demo.add_argument("--plain", action="store_true", help="a plain log, even on a terminal")
    demo.add_argument("--speed", type=float, default=1.0, help="pace of the live view")
    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    bp = bench_sub.add_parser("pass", help="the binder's passes on a synthetic cluster")
    bp.add_argument("--devices", type=int, default=10_000)
    bp.add_argument("--repeat", type=int, default=20)
    bp.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TOP",
        help="also profile `repeat` more exhaustive passes: the TOP functions by own time, "
        "with their call counts (compare sizes by the counts)",
    )
    bp.add_argument("--json", action="store_true")
    bw = bench_sub.add_parser(
        "webhook", help="VMI create → admitted through a local API server and the webhook"
    )
    bw.add_argument("--devices", type=int, default=1_000)
    bw.add_argument("--samples", type=int, default=100, help="VMIs per measured path")
    bw.add_argument("--json", action="store_true")
    bs = bench_sub.add_parser(
        "start",
        help="a burst of VM starts on KWOK nodes with the real scheduler, and the same "
        "burst of plain pods without gpu-binder",
    )
    bs.add_argument("--nodes", type=int, default=500)
    bs.add_argument("--gpus-per-node", type=int, default=8)
    bs.add_argument("--vms", type=int, default=1_000)
    bs.add_argument("--gpus-per-vm", type=int, default=2)
    bs.add_argument(
        "--gc-freeze-interval",
        default=None,
        help="the binder's --gc-freeze-interval, a duration (0s: never freeze; default: the "
        "binder's)",
    )
    bs.add_argument(
        "--vm-controller-threads",
        type=int,
        default=3,
        help="virt-controller's VM controller threads, which create the VMIs (KubeVirt's "
        "default 3; 0: one per VM)",
    )
    bs.add_argument(
        "--vmi-controller-threads",
        type=int,
        default=10,
        help="virt-controller's VMI controller threads, which create the launcher pods "
        "(KubeVirt's default 10; 0: one per VM)",
    )
    bs.add_argument("--json", action="store_true")
    bh = bench_sub.add_parser(
        "heap",
        help="a real binder settled on KWOK nodes' GPUs, then idle: its memory and its "
        "garbage collector's pauses",
    )
    bh.add_argument("--nodes", type=int, default=6_250)
    bh.add_argument("--gpus-per-node", type=int, default=8)
    bh.add_argument("--idle", type=float, default=240.0, help="seconds idle after settling")
    bh.add_argument(
        "--gc-freeze-interval",
        default="60s",
        help="the binder's --gc-freeze-interval (default 60s, so that an idle of minutes "
        "sees its full collections; the binder's own default is 10m)",
    )
    bh.add_argument("--json", action="store_true")
    bk = bench_sub.add_parser(
        "soak",
        help="a real binder through rounds of VM bursts and deletions: whether its memory, "
        "its metrics and its ledger stay flat over many VM lifecycles",
    )
    bk.add_argument("--nodes", type=int, default=50)
    bk.add_argument("--gpus-per-node", type=int, default=8)
    bk.add_argument("--vms", type=int, default=200, help="VM starts a round")
    bk.add_argument("--gpus-per-vm", type=int, default=2)
    bk.add_argument("--rounds", type=int, default=30)
    bk.add_argument(
        "--gc-freeze-interval",
        default="60s",
        help="the binder's --gc-freeze-interval (default 60s, so that cyclic garbage frozen "
        "for an interval is not read as growth; the binder's own default is 10m)",
    )
    bk.add_argument("--json", action="store_true")
    bf = bench_sub.add_parser(
        "flood", help="other reviews' latency while one client floods the webhook server"
    )
    bf.add_argument("--samples", type=int, default=300, help="victim reviews per scenario")
    bf.add_argument("--json", action="store_true")
    for name in DELEGATED:
        sub.add_parser(name, help=f"see gpu-binder {name} --help", add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in DELEGATED:
        return _delegate(args_list[0], args_list[1:])
    args = _parser().parse_args(args_list)
    if args.command == "demo":
        from gpu_binder.demo.command import main_demo

        return main_demo(plain=args.plain, speed=args.speed)
    if args.command == "bench" and args.bench == "pass":
        from gpu_binder.bench.passes import main as bench_pass

        figures = bench_pass(args.devices, args.repeat, args.profile)
        print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
        return 0
    if args.command == "bench" and args.bench == "webhook":
        from gpu_binder.bench.webhook import main as bench_webhook

        figures = bench_webhook(args.devices, args.samples)
        print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
        return 0
    if args.command == "bench" and args.bench == "start":
        from gpu_binder.bench.start import main as bench_start
        from gpu_binder.bench.starttable import table

        figures = bench_start(
            args.nodes,
            args.gpus_per_node,
            args.vms,
            args.gpus_per_vm,
            gc_freeze_interval=args.gc_freeze_interval,
            threads=(args.vm_controller_threads, args.vmi_controller_threads),
        )
        print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
        print(table(figures), file=sys.stderr)
        return 0
    if args.command == "bench" and args.bench == "heap":
        from gpu_binder.bench.heap import main as bench_heap

        figures = bench_heap(args.nodes, args.gpus_per_node, args.idle, args.gc_freeze_interval)
        print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
        return 0
    if args.command == "bench" and args.bench == "soak":
        from gpu_binder.bench.soak import main as bench_soak

        figures = bench_soak(
            args.nodes,
            args.gpus_per_node,
            args.vms,
            args.gpus_per_vm,
            args.rounds,
            args.gc_freeze_interval,
        )
        print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
        return 0
    if args.command == "bench" and args.bench == "flood":
        from gpu_binder.bench.flood import main as bench_flood

        figures = bench_flood(args.samples)
        print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
