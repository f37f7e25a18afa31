"""`gpu-binder usage`: GPU-minutes per tenant over a period, from the GPUUsageRecords.

Exit codes: 0 the report was printed (records that could not be read are named on
stderr and left out); 1 the API server could not be reached or refused the list; 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TypeVar, cast

from gpu_binder.client.errors import ApiError, Forbidden
from gpu_binder.client.interface import Client
from gpu_binder.usage import statefile
from gpu_binder.usage.export import export
from gpu_binder.usage.ledger import (
    DEFAULT_LEDGER,
    DIMENSIONS,
    KINDS,
    Dimension,
    Entry,
    Period,
    Summary,
    Where,
)
from gpu_binder.usage.report import FORMATS, Format, render, rfc3339

PROG = "gpu-binder usage"
R = TypeVar("R")
DEFAULT_BY: tuple[Dimension, ...] = ("namespace", "class")

# Builds the API client from --kubeconfig and --context (None: in-cluster, or $KUBECONFIG).
Connect = Callable[[str | None, str | None], Awaitable[Client]]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MONTH = re.compile(r"(\d{4})-(\d{2})")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(?P<zone>Z|[+-]\d{2}:\d{2})?")


def instant(text: str) -> datetime:
    """An RFC 3339 time with its zone, or a date meaning midnight UTC."""
    s = text.strip().upper()
    if _DATE.fullmatch(s):
        try:
            d = date.fromisoformat(s)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r} is not a date: {e}") from None
        return datetime(d.year, d.month, d.day, tzinfo=UTC)
    m = _TIME.fullmatch(s)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an RFC 3339 time nor a date "
            "(e.g. 2026-11-01T08:00:00Z, 2026-11-01T09:00:00+01:00 or 2026-11-01)"
        )
    if m.group("zone") is None:
        # A bill must not depend on the time zone of the machine that prints it.
        raise argparse.ArgumentTypeError(
            f"{text!r} has no time zone: add Z for UTC or an offset such as +01:00"
        )
    try:
        return datetime.fromisoformat(s).astimezone(UTC)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid time: {e}") from None


def month(text: str) -> Period:
    """YYYY-MM as the period from its first midnight UTC to the next month's."""
    m = _MONTH.fullmatch(text.strip())
    if m is None or not 1 <= int(m.group(2)) <= 12:
        raise argparse.ArgumentTypeError(f"{text!r} is not a month: use YYYY-MM, e.g. 2026-11")
    year, mon = int(m.group(1)), int(m.group(2))
    if year < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a month: use YYYY-MM, e.g. 2026-11")
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + mon // 12, mon % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end)


def dimensions(text: str) -> list[Dimension]:
    """One --by value: a dimension, or several separated by commas."""
    out: list[Dimension] = []
    for part in (p.strip() for p in text.split(",")):
        if part not in DIMENSIONS:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a dimension: use {', '.join(DIMENSIONS)}"
            )
        out.append(part)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="GPU-minutes per group (default: per namespace and class) over a period, "
        "from the GPUUsageRecords. A record counts for the part of it inside [from, to); an "
        "open record counts until --to or now, whichever is earlier.",
        epilog="Dates mean midnight UTC; --to is exclusive, so --from 2026-11-01 --to "
        "2026-12-01 is November, the same as --month 2026-11.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, or $KUBECONFIG)")
    p.add_argument("--context", help="kubeconfig context")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="only this namespace's records")
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace's records (the default)",
    )
    p.add_argument(
        "--ledger-namespace",
        default=os.environ.get("GPU_BINDER_LEDGER_NAMESPACE", DEFAULT_LEDGER),
        metavar="NS",
        help=f"where the ledger lives (default {DEFAULT_LEDGER}, or $GPU_BINDER_LEDGER_NAMESPACE)",
    )
    p.add_argument(
        "--copies",
        action="store_true",
        help="read the tenant's copies in -n's namespace instead of the ledger, as a tenant "
        "may (also done when the ledger may not be read)",
    )
    p.add_argument(
        "--kind",
        choices=KINDS,
        default="all",
        help="attached: GPUs in use by VMIs; reserved: GPUs bound to stopped VMs; all: both, "
        "side by side (the default)",
    )
    p.add_argument(
        "--since-last",
        metavar="FILE",
        type=Path,
        help="bill what the ledger says was used since the export that wrote FILE, and "
        "write it again: runs at any times bill no second twice and drop none (the first "
        "needs --from; see README)",
    )
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--from",
        dest="start",
        type=instant,
        metavar="TIME",
        help="start of the period, inclusive: RFC 3339 (2026-11-01T08:00:00Z) or a date",
    )
    when.add_argument("--month", type=month, metavar="YYYY-MM", help="the calendar month, in UTC")
    p.add_argument(
        "--to",
        dest="end",
        type=instant,
        metavar="TIME",
        help="end of the period, exclusive (default: now); not with --month",
    )
    p.add_argument(
        "--by",
        action="append",
        type=dimensions,
        metavar="DIM",
        help=f"group by {', '.join(DIMENSIONS)}; repeatable or comma-separated "
        f"(default: {','.join(DEFAULT_BY)})",
    )
    p.add_argument("-o", "--format", choices=FORMATS, default="table", help="output format")
    p.add_argument(
        "--chunk-size",
        type=int,
        default=500,
        metavar="N",
        help="records per list request (0: one unpaged list)",
    )
    return p


def period_of(p: argparse.ArgumentParser, args: argparse.Namespace, now: datetime) -> Period:
    """The period the flags name; a bad combination is an argparse error (exit code 2)."""
    if args.start is None and args.month is None:
        p.error("one of the arguments --from --month is required")
    if args.month is not None:
        if args.end is not None:
            p.error("--to cannot be given with --month, which names its own end")
        return cast(Period, args.month)
    start: datetime = args.start
    end: datetime = args.end if args.end is not None else now
    if end <= start and args.end is None:
        p.error(f"--from ({rfc3339(start)}) must be before now ({rfc3339(end)}), the default --to")
    if end <= start:
        p.error(f"--to ({rfc3339(end)}) must be after --from ({rfc3339(start)})")
    return Period(start, end)


def by_of(args: argparse.Namespace) -> tuple[Dimension, ...]:
    given: list[list[Dimension]] = args.by or [list(DEFAULT_BY)]
    # The order given is the order of the columns; a repeated dimension adds nothing.
    return tuple(dict.fromkeys(d for group in given for d in group))


def where_of(args: argparse.Namespace) -> Where:
    return Where(args.namespace, args.ledger_namespace, bool(args.copies))


async def _read(
    client: Client, where: Where, read: Callable[[Where], Awaitable[R]]
) -> tuple[R, Where]:
    """read(where); a tenant the ledger refuses reads its copies instead, told on stderr."""
    try:
        return await read(where), where
    except Forbidden as e:
        if where.copies or not where.namespace:
            raise
        copies = replace(where, copies=True)
        print(
            f"{PROG}: cannot read {where.describe()} ({e.message}); reading {copies.describe()}",
            file=sys.stderr,
        )
        return await read(copies), copies


async def report(
    args: argparse.Namespace,
    period: Period | None,
    now: datetime,
    connect: Connect,
) -> int:
    # Imported here: the API client's modules take a while to load, bad arguments need none.
    from gpu_binder.usage.source import read_entries, read_ledger

    try:
        client = await connect(args.kubeconfig, args.context)
    except Exception as e:  # the factory's own error: no kubeconfig, no in-cluster config
        print(f"{PROG}: no API connection: {e}", file=sys.stderr)
        return 1
    by, kind = by_of(args), args.kind
    try:
        if period is not None:
            reading, _ = await _read(
                client,
                where_of(args),
                lambda w: read_ledger(
                    client, period, by, now, where=w, chunk_size=args.chunk_size, kind=kind
                ),
            )
            summary, skipped, extra = reading.summary, reading.skipped, None
        else:
            (entries, skipped_list), where = await _read(
                client, where_of(args), lambda w: read_entries(client, w, args.chunk_size)
            )
            skipped = tuple(skipped_list)
            done = exported(args, entries, now, where)
            if isinstance(done, int):
                return done
            summary, extra = done
    except ApiError as e:
        print(f"{PROG}: cannot list GPUUsageRecords: {e.message}", file=sys.stderr)
        return 1
    finally:
        # The real client holds an HTTP session; the in-memory one has nothing to close.
        close: Callable[[], Awaitable[None]] | None = getattr(client, "close", None)
        if close is not None:
            await close()
    for s in skipped:
        print(f"{PROG}: skipped record {s.record}: {s.reason}", file=sys.stderr)
    fmt: Format = args.format
    sys.stdout.write(render(summary, fmt, args.namespace, skipped, extra))
    if period is None:
        statefile.commit(args.since_last)
    return 0


def exported(
    args: argparse.Namespace, entries: list[Entry], now: datetime, where: Where
) -> tuple[Summary, dict[str, object]] | int:
    """The export since the state file's last one (usage.export); its new state staged
    for statefile.commit once the report is out. An int: the exit code of a refusal."""
    scope: dict[str, str | None] = {"namespace": args.namespace, "kind": args.kind}
    path: Path = args.since_last
    try:
        state = statefile.load(path, args.start, scope)
    except statefile.Refused as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    to = args.end if args.end is not None else now
    if to <= state.to:
        print(
            f"{PROG}: {path} exported until {rfc3339(state.to)} already; --to "
            f"({rfc3339(to)}) must be after it",
            file=sys.stderr,
        )
        return 2
    run = export(entries, state, to, by_of(args), now, args.kind)
    statefile.stage(path, run.state)
    extra: dict[str, object] = {
        "since_last": {
            "state": str(path),
            "from": rfc3339(state.to),
            "to": rfc3339(to),
            "origin": rfc3339(state.origin),
            "corrections": run.corrections,
            "source": where.describe(),
        }
    }
    return run.summary, extra


async def _real_connect(kubeconfig: str | None, context: str | None) -> Client:
    from gpu_binder.kube import connect

    return await connect(kubeconfig, context=context)


def main_usage(
    argv: Sequence[str] | None = None,
    *,
    connect: Connect | None = None,
    clock: Callable[[], datetime] | None = None,
) -> int:
    """Entry point of `gpu-binder usage ARGS`; `connect` builds the API client."""
    now = (clock or (lambda: datetime.now(UTC)))().astimezone(UTC)
    p = parser()
    try:
        args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.chunk_size < 0:
            p.error("--chunk-size must be 0 or more")
        if args.copies and not args.namespace:
            p.error("--copies reads one tenant's copies: give its namespace with -n")
        period: Period | None = None
        if args.since_last is not None:
            if args.month is not None:
                p.error("--since-last exports from where the last export ended: not --month")
        else:
            period = period_of(p, args, now)
    except SystemExit as e:
        # argparse exits on --help (0) and on bad arguments (2); callers get the code.
        return e.code if isinstance(e.code, int) else 2
    with statefile.locked(args.since_last):
        return asyncio.run(report(args, period, now, connect or _real_connect))
