"""`gpu-binder agent`: the node agent's command line (issue 4 part 6)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpu_binder.agent.deviceplugin import DevicePluginManager
from gpu_binder.agent.deviceplugin.plugin import VFIO_DIR
from gpu_binder.agent.deviceplugin.rpc import PLUGIN_DIR
from gpu_binder.agent.discovery import scan
from gpu_binder.agent.pci import SysfsError
from gpu_binder.agent.runner import AgentConfig, NodeAgent
from gpu_binder.agent.sync import observe, plan
from gpu_binder.cli.flags import add_log_flags, duration, env_adder
from gpu_binder.cli.logs import setup as setup_logs
from gpu_binder.client.errors import ApiError
from gpu_binder.client.interface import Client

# Builds the API client from --kubeconfig (None: in-cluster); the CLI passes the real one.
Connect = Callable[[str | None], Awaitable[Client]]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-binder agent",
        description="Keep this node's GPUDevices in step with its GPUs, reset released "
        "GPUs, and serve them to the kubelet one slot resource each.",
        epilog="Every flag may be given in the environment as GPU_BINDER_<FLAG>, e.g. "
        "GPU_BINDER_INTERVAL=30s, as for gpu-binder run; a flag on the command line wins.",
    )
    add = env_adder(p)
    add(
        "--root",
        type=Path,
        default=Path("/"),
        help="the host's root: sysfs is read at ROOT/sys, VFIO at ROOT/dev/vfio",
    )
    add("--node", help="node name (default: $NODE_NAME, else the host name)")
    add("--once", action="store_true", help="one pass, then exit")
    add(
        "--dry-run",
        action="store_true",
        help="print the GPUDevices as YAML instead of writing them (implies --once)",
    )
    add(
        "--interval",
        type=duration,
        default=timedelta(seconds=10),
        help="time between rescans of sysfs, e.g. 10s (changes of the node's GPUDevices and "
        "of the GPUClasses are watched and seen at once)",
    )
    add(
        "--resync",
        type=duration,
        default=timedelta(minutes=5),
        help="time between fresh lists of the watched objects, a safety net, e.g. 5m",
    )
    add(
        "--vendor",
        action="append",
        default=[],
        help="PCI vendor id to discover, e.g. 0x10de (default: the classes' vendors)",
    )
    add(
        "--device-plugin-dir",
        type=Path,
        default=Path(PLUGIN_DIR),
        help="the kubelet's device-plugin directory, holding kubelet.sock",
    )
    add(
        "--host-vfio-dir",
        type=Path,
        default=VFIO_DIR,
        help="where the kubelet's host has the VFIO device nodes that Allocate hands to "
        "containers (host paths, not under --root; default /dev/vfio)",
    )
    add(
        "--no-device-plugin", action="store_true", help="do not serve slot resources to the kubelet"
    )
    add("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    add_log_flags(add)
    return p


def node_name(flag: str | None) -> str:
    """--node, else NODE_NAME (the DaemonSet's downward API), else the host name."""
    # The kubelet registers a node under its lower-cased host name by default.
    return flag or os.environ.get("NODE_NAME") or socket.gethostname().lower()


def dry_run(root: Path, node: str, vendors: list[str], out: TextIO, err: TextIO) -> int:
    """Print the GPUDevices a first sync would create on an empty cluster."""
    try:
        found = scan(root, vendors or ["0x10de"])
    except SysfsError as e:
        print(f"gpu-binder agent: {e}", file=err)
        return 1
    for note in found.notes():
        print(f"# {note}", file=err)
    p = plan(node, observe(found, root), [], found.unreadable)
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": d.api_version,
            "kind": d.kind,
            "metadata": {"name": d.name, "labels": dict(d.metadata.labels)},
            "spec": d.spec.to_dict(),
        }
        for d in p.create
    ]
    yaml.safe_dump_all(docs, out, sort_keys=False)
    return 0


async def run(args: argparse.Namespace, client: Client) -> int:
    config = AgentConfig(
        node=node_name(args.node),
        root=args.root,
        interval=args.interval.total_seconds(),
        resync=args.resync.total_seconds(),
        vendors=tuple(args.vendor),
    )
    plugins = (
        None
        if args.no_device_plugin
        else DevicePluginManager(args.device_plugin_dir, host_vfio_dir=args.host_vfio_dir)
    )
    agent = NodeAgent(config, client, plugins=plugins)
    if args.once:
        try:
            report = await agent.run_pass()
        except SysfsError as e:
            print(f"gpu-binder agent: {e}", file=sys.stderr)
            return 1
        except ApiError as e:
            # e.g. Forbidden on a read: the agent's ClusterRole is missing or too narrow.
            print(f"gpu-binder agent: {e.message}", file=sys.stderr)
            return 1
        finally:
            if plugins is not None:
                await plugins.close()
        for error in report.sync.errors:
            print(f"gpu-binder agent: {error}", file=sys.stderr)
        return 1 if report.sync.errors else 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, agent.wake.set)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await agent.run(stop)
    return 0


def _default_connect() -> Connect | None:
    """The real API client's factory, `gpu_binder.kube.connect`, when this build has it."""
    try:
        module = importlib.import_module("gpu_binder.kube")
    except ImportError:
        return None
    found: Connect | None = getattr(module, "connect", None)
    return found


def main_agent(argv: list[str] | None = None, connect: Connect | None = None) -> int:
    """Entry point of `gpu-binder agent ARGS`; `connect` builds the API client."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    setup_logs(args.log_level, args.log_format)
    node = node_name(args.node)
    if args.dry_run:
        return dry_run(args.root, node, args.vendor, sys.stdout, sys.stderr)
    make = connect or _default_connect()
    if make is None:
        print("gpu-binder agent: no API client in this build; use --dry-run", file=sys.stderr)
        return 2

    async def main() -> int:
        try:
            client = await make(args.kubeconfig)
        except Exception as e:  # the factory's own error: no kubeconfig, no in-cluster config
            print(f"gpu-binder agent: no API connection: {e}", file=sys.stderr)
            return 1
        try:
            return await run(args, client)
        finally:
            # The real client holds an HTTP session; the in-memory one has nothing to close.
            close: Callable[[], Awaitable[None]] | None = getattr(client, "close", None)
            if close is not None:
                await close()

    return asyncio.run(main())
