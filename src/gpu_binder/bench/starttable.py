"""`gpu-binder bench start`'s figures side by side, for a person (bench.start makes them)."""

from __future__ import annotations

from typing import Any

from gpu_binder.binder import PASS_KEY, REQUESTS_KEY


def table(figures: dict[str, Any]) -> str:
    """The figures side by side, for a person."""
    b, g = figures["baseline"], figures["gpu_binder"]
    k = figures.get("kubevirt_alone") or {}

    def cell(d: dict[str, Any], key: str) -> str:
        f = d.get(key) or {}
        return f"{f['p50_ms']:.0f} / {f['p99_ms']:.0f}" if f.get("samples") else "-"

    def unrecorded(d: dict[str, Any]) -> str:
        f = d.get("ledger") or {}
        return f"{f['without_attached_record']} / {f['without_reserved_record']}" if f else "-"

    def paused(d: dict[str, Any]) -> str:
        f = (d.get("gc_pauses") or {}).get("2")
        return f"{f['n']} / {f['seconds']:.2f} / {f['over_0.25_s']}" if f else "-"

    def passes(d: dict[str, Any], key: str) -> str:
        f = (d.get("passes") or {}).get(key)
        return f"{f['n']} / {f['seconds']:.1f} / {f['over_1.0_s']}" if f else "-"

    def held(d: dict[str, Any], webhook: str) -> str:
        f = (d.get("webhooks") or {}).get(webhook)
        if not f or not f["n"]:
            return "-"
        return f"{f['n']} / {1e3 * f['seconds'] / f['n']:.0f} / {f['over_0.25_s']}"

    def called(d: dict[str, Any], prefix: str) -> str:
        # As the API server timed its calls of the webhook (bench.apicalls.webhook_calls).
        for name, f in (d.get("webhook_calls") or {}).items():
            if name.startswith(prefix):
                return f"{f['n']} / {f['mean_ms']:.0f}"
        return "-"

    def lag(d: dict[str, Any]) -> str:
        f = (d.get("loop_lag") or {}).get("")
        if not f or not f["n"]:
            return "-"
        return f"{1e3 * f['seconds'] / f['n']:.0f} / {f['over_0.05_s']} / {f['over_0.25_s']}"

    def cpu(d: dict[str, Any], name: str) -> str:
        value = (d.get("cpu_ms_per_start") or {}).get(name)
        return "-" if value is None else f"{value:.1f}"

    def total(d: dict[str, Any]) -> str:
        return str((d.get("api_requests_per_start") or {}).get("total", "-"))

    rows: list[tuple[str, str, str, str]] = [
        (
            "VMI create → admitted, p50 / p99 ms",
            cell(g, "vmi_create_to_admitted"),
            cell(k, "vmi_create_to_admitted"),
            "-",
        ),
        (
            "VM create → VMI admitted, p50 / p99 ms",
            cell(g, "vm_create_to_vmi_admitted"),
            cell(k, "vm_create_to_vmi_admitted"),
            "-",
        ),
        (
            "pod create → scheduled, p50 / p99 ms",
            cell(g, "pod_create_to_scheduled"),
            cell(k, "pod_create_to_scheduled"),
            cell(b, "pod_create_to_scheduled"),
        ),
        ("starts per second", str(g["starts_per_s"]), str(k.get("starts_per_s", "-")),
         str(b["starts_per_s"])),
        ("API requests per start", total(g), total(k), total(b)),
        ("CPU ms per start: kube-apiserver", cpu(g, "kube-apiserver"),
         cpu(k, "kube-apiserver"), cpu(b, "kube-apiserver")),
        ("CPU ms per start: etcd", cpu(g, "etcd"), cpu(k, "etcd"), cpu(b, "etcd")),
        ("CPU ms per start: gpu-binder", cpu(g, "gpu-binder"), "-", "-"),
        ("CPU ms per start: every process", cpu(g, "total"), cpu(k, "total"), cpu(b, "total")),
        ("pods not on their set's node", str(g["pods_not_on_their_sets_node"]), "-", "-"),
        ("GPUs without an Attached / a Reserved record", unrecorded(g), "-", "-"),
        ("VMIs refused, then created again", str(g["vmi_refused_then_retried"]), "-", "-"),
        ("launcher pods refused, then created again", str(g["pods_refused_then_retried"]),
         "-", "-"),
        ("pods not scheduled", str(g["not_scheduled"]), str(k.get("not_scheduled", "-")),
         str(b["not_scheduled"])),
        ("binder's full GC pauses: n / s / over 0.25 s", paused(g), "-", "-"),
        ("requests passes: n / s / over 1 s", passes(g, REQUESTS_KEY), "-", "-"),
        ("full passes: n / s / over 1 s", passes(g, PASS_KEY), "-", "-"),
        ("VMI webhook held: n / mean ms / over 0.25 s", held(g, "vmi"), "-", "-"),
        ("pod webhook held: n / mean ms / over 0.25 s", held(g, "pod"), "-", "-"),
        ("VMI webhook called by the API server: n / mean ms", called(g, "vmi."), "-", "-"),
        ("pod webhook called by the API server: n / mean ms", called(g, "pod."), "-", "-"),
        ("binder's event loop late: mean ms / over 50 / 250 ms", lag(g), "-", "-"),
    ]  # fmt: skip
    head = (
        f"{figures['vms']} starts of {figures['gpus_per_vm']} GPUs on {figures['nodes']} "
        f"KWOK nodes × {figures['gpus_per_node']} GPUs (real kube-scheduler)"
    )
    width = max(len(r[0]) for r in rows)
    columns = ("gpu-binder", "KubeVirt alone", "baseline")
    lines = [head, f"{'':{width}}" + "".join(f"  {c:>14}" for c in columns)]
    lines += [f"{r[0]:{width}}" + "".join(f"  {c:>14}" for c in r[1:]) for r in rows]
    threads = g.get("virt_controller")
    if threads:
        lines.append(
            f"virt-controller: {threads['vm_threads']} VM and {threads['vmi_threads']} VMI "
            f"controller threads (0: one per VM), its client {threads['qps']:g} requests a "
            f"second in bursts of {threads['burst']}"
        )
    lines.append(f"throughput ratio gpu-binder / baseline: {figures['throughput_ratio']}")
    if k:
        lines.append(
            f"KubeVirt alone / baseline: {figures['kubevirt_alone_ratio']}"
            f" (the most a controller in KubeVirt's path reaches here); gpu-binder /"
            f" KubeVirt alone: {figures['gpu_binder_to_kubevirt_alone']}"
        )
    return "\n".join(lines)
