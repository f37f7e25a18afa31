"""The `kubectl-gpu` command (so `kubectl gpu ...` once it is on PATH), and the same
subcommands as `gpu-binder status|vm|why|drain|check`.

Exit codes: 0 answered; 1 the API could not be read, the object does not exist, or (check)
the webhook does not answer; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

from gpu_binder.client.interface import Client
from gpu_binder.kubectl.output import FORMATS, Format, Printer

PROG = "kubectl gpu"
SUBCOMMANDS = ("status", "vm", "why", "drain", "usage", "check")


def _common(top: bool) -> argparse.ArgumentParser:
    """The flags kubectl users put anywhere: before the subcommand (top) or after it.

    After it they default to SUPPRESS, so a flag given before is not reset to None.
    """
    unset = None if top else argparse.SUPPRESS
    c = argparse.ArgumentParser(add_help=False)
    c.add_argument(
        "--kubeconfig", default=unset, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    c.add_argument("--context", default=unset, help="kubeconfig context")
    c.add_argument("-n", "--namespace", default=unset, help="namespace (default: the context's)")
    c.add_argument("-o", "--output", default=unset, choices=FORMATS, help="wide, json or yaml")
    return c


def parser() -> argparse.ArgumentParser:
    common = _common(top=False)
    p = argparse.ArgumentParser(
        prog=PROG,
        description="The cluster's GPUs as gpu-binder binds them, read with your kubeconfig.",
        parents=[_common(top=True)],
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status = sub.add_parser(
        "status", parents=[common], help="every class's GPUs, and every node's slots by phase"
    )
    status.add_argument(
        "-A", "--all-namespaces", action="store_true", help="VMs of every namespace (the default)"
    )
    vm = sub.add_parser(
        "vm", parents=[common], help="a VM's set, node, each GPU's phase, its decisions"
    )
    vm.add_argument("ref", metavar="NS/NAME", help="the VM (NAME alone: in -n's namespace)")
    why = sub.add_parser(
        "why", parents=[common], help="why a VM is not bound, waits, was moved or refused"
    )
    why.add_argument("ref", metavar="NS/NAME")
    drain = sub.add_parser(
        "drain",
        parents=[common],
        help="what draining a node would do: sets that move where, VMIs that block",
    )
    drain.add_argument("node", metavar="NODE")
    sub.add_parser(
        "check", parents=[common], help="does gpu-binder's webhook answer? (a dry-run VMI)"
    )
    sub.add_parser("usage", add_help=False, help="GPU-minutes per tenant (gpu-binder usage)")
    return p


def fmt_of(args: argparse.Namespace) -> Format:
    out: str | None = args.output
    return "table" if out is None else out  # type: ignore[return-value]


async def run(
    argv: Sequence[str],
    out: TextIO,
    err: TextIO,
    *,
    client: Client | None = None,
    colour: bool | None = None,
    clock: Callable[[], datetime] | None = None,
) -> int:
    """One command, in a running event loop; `client` instead of the kubeconfig's, and
    `clock` for the ages of Events (the embedded cluster's virtual time)."""
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    from gpu_binder.client.errors import ApiError
    from gpu_binder.kube import ConfigError
    from gpu_binder.kubectl import session

    own = client is None
    if client is None:
        try:
            client = await session.open_client(args.kubeconfig, args.context)
        except ConfigError as e:
            print(f"{PROG}: {e}", file=err)
            return 1
    try:
        namespace = args.namespace or session.default_namespace(args.kubeconfig, args.context)
        now = (clock or (lambda: datetime.now(UTC)))()
        printer = Printer(out, colour)
        return await _answer(args, client, printer, fmt_of(args), namespace, err, now)
    except ApiError as e:
        print(f"{PROG}: {e.message}", file=err)
        return 1
    finally:
        close = getattr(client, "close", None) if own else None
        if close is not None:
            await close()


async def _answer(
    args: argparse.Namespace,
    client: Client,
    printer: Printer,
    fmt: Format,
    namespace: str,
    err: TextIO,
    now: datetime,
) -> int:
    from gpu_binder.kube import KubeClient
    from gpu_binder.kubectl import check, drain, session, snapshot, status, vm, why

    if args.command == "status":
        scope = None if args.all_namespaces or not args.namespace else args.namespace
        snap = await snapshot.read(client, scope, vms=False)
        status.show(snap, printer, fmt, scope)
        _forbidden(snap.forbidden, err)
        return 0
    if args.command in ("vm", "why"):
        ns, name = session.split_ref(args.ref, namespace)
        facts = await vm.gather(client, ns, name)
        if facts.vm is None and facts.vmi is None:
            print(f'{PROG}: virtualmachines.kubevirt.io "{name}" not found in {ns}', file=err)
            return 1
        (vm.show if args.command == "vm" else why.show)(facts, printer, fmt, now)
        return 0
    if args.command == "drain":
        drain.show(await drain.plan(client, args.node, now), printer, fmt)
        return 0
    if not isinstance(client, KubeClient):
        print(f"{PROG}: check needs a real API server", file=err)
        return 2
    findings = await check.check(client, namespace)
    if fmt in ("json", "yaml"):
        printer.data([{"ok": f.ok, "what": f.what} for f in findings], fmt)
    else:
        printer.text(check.render(findings, lambda ok: "ok  " if ok else "FAIL"))
    return 0 if all(f.ok for f in findings) else 1


def _forbidden(kinds: list[str], err: TextIO) -> None:
    if kinds:
        print(f"{PROG}: not readable with these credentials: {', '.join(kinds)}", file=err)


def main_kubectl(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Entry point of `kubectl-gpu ARGS` and `gpu-binder status|vm|why|drain|check ARGS`."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "usage":
        from gpu_binder.usage.command import main_usage

        return main_usage(args_list[1:])
    return asyncio.run(run(args_list, out or sys.stdout, err or sys.stderr))


def main() -> None:
    """The console script `kubectl-gpu`."""
    sys.exit(main_kubectl())
