"""`gpu-binder usage`: GPU-minutes per tenant over a period, from the GPUUsageRecords.

Exit codes: 0 the report was printed (records that could not be read are named on
stderr and left out); 1 the API server could not be reached or refused the list; 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, date, datetime
from typing import cast

from gpu_binder.client.errors import ApiError
from gpu_binder.client.interface import Client
from gpu_binder.usage.ledger import DIMENSIONS, Dimension, Period
from gpu_binder.usage.report import FORMATS, Format, render, rfc3339

PROG = "gpu-binder usage"
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
    when = p.add_mutually_exclusive_group(required=True)
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


async def report(
    args: argparse.Namespace,
    period: Period,
    now: datetime,
    connect: Connect,
) -> int:
    # Imported here: the API client's modules take a while to load, bad arguments need none.
    from gpu_binder.usage.source import read_ledger

    try:
        client = await connect(args.kubeconfig, args.context)
    except Exception as e:  # the factory's own error: no kubeconfig, no in-cluster config
        print(f"{PROG}: no API connection: {e}", file=sys.stderr)
        return 1
    try:
        reading = await read_ledger(
            client,
            period,
            by_of(args),
            now,
            namespace=args.namespace,
            chunk_size=args.chunk_size,
        )
    except ApiError as e:
        print(f"{PROG}: cannot list GPUUsageRecords: {e.message}", file=sys.stderr)
        return 1
    finally:
        # The real client holds an HTTP session; the in-memory one has nothing to close.
        close: Callable[[], Awaitable[None]] | None = getattr(client, "close", None)
        if close is not None:
            await close()
    for s in reading.skipped:
        print(f"{PROG}: skipped record {s.record}: {s.reason}", file=sys.stderr)
    fmt: Format = args.format
    sys.stdout.write(render(reading.summary, fmt, args.namespace, reading.skipped))
    return 0


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
        period = period_of(p, args, now)
    except SystemExit as e:
        # argparse exits on --help (0) and on bad arguments (2); callers get the code.
        return e.code if isinstance(e.code, int) else 2
    return asyncio.run(report(args, period, now, connect or _real_connect))
