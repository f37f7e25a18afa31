"""``python -m gpu_binder.envtest [CRD paths...]``: run a local control plane until Ctrl-C.

Prints the kubeconfig path (for kubectl) and how long startup took. ``--check`` starts,
checks /version, prints the timing and stops (a smoke test).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from types import FrameType

from .assets import AssetsBuildError, AssetsUnavailable
from .controlplane import ControlPlane, ControlPlaneError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_binder.envtest", description=__doc__)
    parser.add_argument("crds", nargs="*", help="CRD YAML files or directories to install")
    parser.add_argument("--check", action="store_true", help="start, query /version, stop")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs) on exit")
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        with ControlPlane(keep_work_dir=args.keep or None) as cp:
            print(f"control plane up in {cp.startup_seconds:.1f} s at {cp.url}", file=sys.stderr)
            if args.crds:
                t0 = time.monotonic()
                names = [c["metadata"]["name"] for c in cp.install_crds(args.crds)]
                took = time.monotonic() - t0
                print(f"installed {len(names)} CRDs in {took:.1f} s", file=sys.stderr)
            if args.check:
                version = cp.request("GET", "/version").json()
                print(f"kube-apiserver {version['gitVersion']} answered /version", file=sys.stderr)
                return 0
            print(f"export KUBECONFIG={cp.kubeconfig}")
            print("Ctrl-C to stop", file=sys.stderr)
            sys.stdout.flush()
            stop.wait()
            print("stopping", file=sys.stderr)
    except (AssetsUnavailable, AssetsBuildError, ControlPlaneError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
