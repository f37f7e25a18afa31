"""`gpu-binder usage`: flags, exit codes, and reading records through a client."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import pytest

from gpu_binder.api.kinds import T
from gpu_binder.api.types import GPUUsageRecord, RecordKind
from gpu_binder.cli.main import main
from gpu_binder.client.errors import Forbidden, Gone
from gpu_binder.client.interface import Client, ListResult
from gpu_binder.kube.client import KubeClient
from gpu_binder.kube.config import Connection
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.usage.command import Connect, main_usage

from .records import LEDGER, at, copy, record

NOW = at(200)  # 2026-11-09T08:00:00Z


def clock() -> datetime:
    return NOW


def serving(client: Client) -> Connect:
    async def connect(kubeconfig: str | None, context: str | None) -> Client:
        return client

    return connect


@pytest.fixture
def cluster() -> MemoryClient:
    c = MemoryClient()
    c.put(record("r1", at(-24), at(48), namespace="tenant-a"))
    c.put(record("r2", at(100), None, namespace="tenant-a", vm="vm-2"))
    c.put(record("r3", at(10), at(11.5), namespace="tenant-b", class_name="l40s"))
    c.put(record("r4", at(10), at(20), namespace="tenant-b"))
    # tenant-b's VM stopped after r4: its GPU reserved for it 2 h more.
    c.put(record("r5", at(20), at(22), namespace="tenant-b", kind=RecordKind.RESERVED))
    # The tenants' copies in their own namespaces: not the ledger, never billed twice.
    for r in list(c.objects(GPUUsageRecord)):
        c.put(copy(r))
    return c


def usage(client: Client, *argv: str) -> int:
    return main_usage(list(argv), connect=serving(client), clock=clock)


def json_bill(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


# --- the report ------------------------------------------------------------------------


def test_the_default_bill_is_gpu_minutes_per_namespace_and_class(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-11") == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "NAMESPACE  CLASS  RECORDS  ATTACHED-MIN  RESERVED-MIN  GPU-MINUTES  GPU-HOURS",
        "tenant-a   h100         2      8,880.00          0.00     8,880.00     148.00",
        "tenant-b   h100         2        600.00        120.00       720.00      12.00",
        "tenant-b   l40s         1         90.00          0.00        90.00       1.50",
        "TOTAL                   5      9,570.00        120.00     9,690.00     161.50",
    ]


def test_a_month_is_its_first_midnight_to_the_next_months(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-12", "-o", "json") == 0
    doc = json_bill(capsys)
    assert (doc["from"], doc["to"]) == ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z")


def test_to_defaults_to_now(cluster: MemoryClient, capsys: pytest.CaptureFixture[str]) -> None:
    assert usage(cluster, "--from", "2026-11-01", "-o", "json") == 0
    assert json_bill(capsys)["to"] == "2026-11-09T08:00:00Z"


def test_the_period_clips_every_record(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--from", "2026-11-02T00:00:00Z", "--to", "2026-11-05T04:00:00+00:00"]
    assert usage(cluster, *args, "--by", "namespace", "-o", "json") == 0
    # r1 from its 24th to its 48th hour, r2 not yet started, tenant-b's before the period.
    assert [(g["namespace"], g["gpu_hours"]) for g in json_bill(capsys)["groups"]] == [
        ("tenant-a", 24.0)
    ]


def test_a_namespace_bills_only_its_own_records(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-11", "-n", "tenant-b", "-o", "json") == 0
    doc = json_bill(capsys)
    assert doc["namespace"] == "tenant-b"
    assert {g["namespace"] for g in doc["groups"]} == {"tenant-b"}


def test_by_is_repeatable_and_takes_lists(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-11", "--by", "vm", "--by", "node,vm", "-o", "json") == 0
    doc = json_bill(capsys)
    assert doc["by"] == ["vm", "node"]
    assert [(g["vm"], g["node"]) for g in doc["groups"]] == [
        ("tenant-a/vm-1", "node-a"),
        ("tenant-a/vm-2", "node-a"),
        ("tenant-b/vm-1", "node-a"),
    ]


def test_csv_is_written_for_spreadsheets(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-11", "--by", "namespace", "-o", "csv") == 0
    assert capsys.readouterr().out.splitlines() == [
        "namespace,classes,records,attached_gpu_seconds,reserved_gpu_seconds,"
        "gpu_seconds,gpu_minutes,gpu_hours",
        "tenant-a,h100,2,532800.0,0.0,532800.0,8880.0,148.0",
        'tenant-b,"h100,l40s",3,41400.0,7200.0,48600.0,810.0,13.5',
        'TOTAL,"h100,l40s",5,574200.0,7200.0,581400.0,9690.0,161.5',
    ]


def test_the_command_is_a_subcommand_of_gpu_binder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--help"]) == 0
    assert "GPU-minutes per group" in capsys.readouterr().out


# --- bad input: exit code 2 and a clear error ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from", "yesterday"], "'yesterday' is neither an RFC 3339 time nor a date"),
        (["--from", "2026-11-01T08:00:00"], "has no time zone"),
        (["--from", "2026-02-30"], "'2026-02-30' is not a date"),
        (["--from", "2026-11-01T25:00:00Z"], "is not a valid time"),
        (["--from", "2026-11-02", "--to", "2026-11-01"], "--to (2026-11-01T00:00:00Z) must be"),
        (["--from", "2026-11-02", "--to", "2026-11-02"], "must be after --from"),
        (["--from", "2026-12-01"], "must be before now (2026-11-09T08:00:00Z), the default --to"),
        (["--month", "2026-13"], "'2026-13' is not a month"),
        (["--month", "2026-11", "--to", "2026-11-15"], "--to cannot be given with --month"),
        (["--from", "2026-11-01", "--month", "2026-11"], "not allowed with argument"),
        (["--to", "2026-11-01"], "one of the arguments --from --month is required"),
        (["--month", "2026-11", "--by", "tenant"], "'tenant' is not a dimension"),
        (["--month", "2026-11", "-o", "yaml"], "invalid choice: 'yaml'"),
        (["--month", "2026-11", "-n", "a", "-A"], "not allowed with argument"),
        (["--month", "2026-11", "--chunk-size", "-1"], "--chunk-size must be 0 or more"),
    ],
)
def test_bad_input_is_refused_with_exit_code_2(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert usage(cluster, *argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


# --- reading through the API -------------------------------------------------------------


class ListForbidden(MemoryClient):
    async def list(
        self, kind: type[T], namespace: str | None = None, label_selector: str | None = None
    ) -> ListResult[T]:
        raise Forbidden('gpuusagerecords.gpu.cozystack.io is forbidden: User "bob" cannot list')


def test_a_refused_list_exits_1_saying_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert usage(ListForbidden(), "--month", "2026-11") == 1
    assert "cannot list GPUUsageRecords: gpuusagerecords" in capsys.readouterr().err


def test_no_connection_exits_1_saying_why(capsys: pytest.CaptureFixture[str]) -> None:
    async def fails(kubeconfig: str | None, context: str | None) -> Client:
        raise OSError("kubeconfig /nowhere does not exist")

    assert main_usage(["--month", "2026-11"], connect=fails, clock=clock) == 1
    assert "no API connection: kubeconfig /nowhere does not exist" in capsys.readouterr().err


def item(name: str, namespace: str = "tenant-a", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "vm": "vm-1",
            "vmi": {"name": "vm-1", "uid": "u"},
            "device": "node-a-0000-3b-00-0",
            "className": "h100",
            "nodeName": "node-a",
            "start": "2026-11-01T00:00:00Z",
            "end": "2026-11-01T01:00:00Z",
            **spec,
        },
    }


class PagedServer(KubeClient):
    """The real client, answering its list requests from pages instead of a server."""

    def __init__(self, items: list[Any], expire_after: int | None = None) -> None:
        super().__init__(Connection(server="https://api.invalid", ssl=False))
        self.items = items
        self.expire_after = expire_after  # pages served before a continue token expires
        self.queries: list[dict[str, str]] = []

    async def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        q = dict(query or {})
        self.queries.append(q)
        assert (method, url_path) == ("GET", LEDGER_PATH)
        expired = self.expire_after is not None and len(self.queries) > self.expire_after
        if "continue" in q and expired:
            self.expire_after = None
            raise Gone("the provided continue parameter is too old")
        start = int(q.get("continue", "0"))
        limit = int(q.get("limit", "0")) or len(self.items)
        end = start + limit
        meta = {"resourceVersion": "7"} | ({"continue": str(end)} if end < len(self.items) else {})
        return {"items": self.items[start:end], "metadata": meta}


LEDGER_PATH = f"/apis/gpu.cozystack.io/v1alpha1/namespaces/{LEDGER}/gpuusagerecords"
TENANT_A_PATH = "/apis/gpu.cozystack.io/v1alpha1/namespaces/tenant-a/gpuusagerecords"


def run_on(server: PagedServer, *argv: str) -> int:
    return main_usage(["--month", "2026-11", *argv], connect=serving(server), clock=clock)


def test_malformed_records_are_reported_on_stderr_and_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = PagedServer(
        [
            item("good"),
            item("no-start", start=None),
            item("backwards", end="2026-10-31T00:00:00Z"),
            item("naive", start="2026-11-01T00:00:00"),
            "not an object",
            item("also-good", namespace="tenant-b"),
        ]
    )
    assert run_on(server, "-o", "json") == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["total"]["records"] == 2
    assert [s["record"] for s in doc["skipped"]] == [
        "tenant-a/no-start",
        "tenant-a/backwards",
        "tenant-a/naive",
        "?/?",
    ]
    err = captured.err.splitlines()
    assert err[0] == (
        "gpu-binder usage: skipped record tenant-a/no-start: "
        "spec.start: Input should be a valid datetime"
    )
    assert "spec.end 2026-10-31T00:00:00+00:00 is before spec.start" in err[1]
    assert "has no time zone" in err[2]
    assert err[3].startswith("gpu-binder usage: skipped record ?/?: the object: ")


def test_records_are_read_in_pages_of_the_chunk_size(capsys: pytest.CaptureFixture[str]) -> None:
    server = PagedServer([item(f"r{i}") for i in range(5)])
    assert run_on(server, "--chunk-size", "2", "-o", "json") == 0
    assert json_bill(capsys)["total"]["records"] == 5
    assert server.queries == [
        {"limit": "2"},
        {"limit": "2", "continue": "2"},
        {"limit": "2", "continue": "4"},
    ]


def test_an_expired_continue_token_restarts_the_list_unpaged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = PagedServer([item(f"r{i}") for i in range(5)], expire_after=1)
    assert run_on(server, "--chunk-size", "2", "-o", "json") == 0
    # Nothing is counted twice: the records of the pages read before are dropped.
    assert json_bill(capsys)["total"]["records"] == 5
    assert server.queries[-1] == {}


class Scoped(PagedServer):
    """Answers every list with nothing, noting the path and query."""

    def __init__(self, refuse_ledger: bool = False) -> None:
        super().__init__([])
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.refuse_ledger = refuse_ledger

    async def request(self, method: str, url_path: str, *a: Any, **kw: Any) -> dict[str, Any]:
        self.seen.append((url_path, dict(kw.get("query") or {})))
        if self.refuse_ledger and url_path == LEDGER_PATH:
            raise Forbidden('gpuusagerecords is forbidden: User "ann" cannot list')
        return {"items": [], "metadata": {"resourceVersion": "1"}}


def test_a_tenants_bill_is_read_from_the_ledger_by_its_label(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = Scoped()
    assert run_on(server, "-n", "tenant-a", "--chunk-size", "0") == 0
    assert server.seen == [(LEDGER_PATH, {"labelSelector": "gpu.cozystack.io/namespace=tenant-a"})]


def test_copies_are_read_in_the_tenants_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    server = Scoped()
    assert run_on(server, "-n", "tenant-a", "--copies", "--chunk-size", "0") == 0
    assert server.seen == [(TENANT_A_PATH, {})]


def test_a_tenant_the_ledger_refuses_reads_its_copies_saying_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = Scoped(refuse_ledger=True)
    assert run_on(server, "-n", "tenant-a", "--chunk-size", "0") == 0
    assert [path for path, _ in server.seen] == [LEDGER_PATH, TENANT_A_PATH]
    assert "reading the copies in namespace tenant-a" in capsys.readouterr().err


def test_a_tenant_bills_the_same_from_its_copies(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-11", "-n", "tenant-b", "-o", "json") == 0
    ledger = json_bill(capsys)
    assert usage(cluster, "--month", "2026-11", "-n", "tenant-b", "--copies", "-o", "json") == 0
    assert json_bill(capsys)["groups"] == ledger["groups"]


def test_kind_bills_attached_or_reserved_time_alone(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usage(cluster, "--month", "2026-11", "--kind", "reserved", "-o", "json") == 0
    doc = json_bill(capsys)
    assert [(g["namespace"], g["gpu_minutes"]) for g in doc["groups"]] == [("tenant-b", 120.0)]
    assert usage(cluster, "--month", "2026-11", "--kind", "attached", "-o", "json") == 0
    assert json_bill(capsys)["total"]["gpu_minutes"] == 9570.0


def test_every_record_counts_the_same_through_either_client(
    cluster: MemoryClient, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = [r for r in cluster.objects(GPUUsageRecord) if r.metadata.namespace == LEDGER]
    server = PagedServer([r.to_dict() for r in ledger])
    assert usage(cluster, "--month", "2026-11", "-o", "json") == 0
    memory = json_bill(capsys)
    assert run_on(server, "-o", "json") == 0
    assert json_bill(capsys)["groups"] == memory["groups"]
