"""Container images made here from one static binary: no registry is reachable.

Debian's ``busybox-static`` is a single statically linked executable that is every small
Unix tool, so an image of one layer (``/bin/busybox`` and its applet links) runs a shell,
``env``, ``sleep`` and ``cat``: enough for test pods and for the pod sandbox ("pause")
image. The image is written as a ``docker save`` archive (``manifest.json`` with
``RepoTags``), which ``ctr images import`` reads and names by its tag.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BUSYBOX", "PAUSE_IMAGE", "TEST_IMAGE", "busybox_binary", "write_image"]

# Tags in a domain of our own, so nothing ever tries to pull them from a registry.
TEST_IMAGE = "gpu-binder.local/busybox:test"
PAUSE_IMAGE = "gpu-binder.local/pause:test"
BUSYBOX = "/bin/busybox"
# The applets test pods use, as links in /bin (busybox runs the one it is called as).
APPLETS = ("sh", "env", "sleep", "cat", "echo", "grep", "sort", "ls", "true", "tr")
# The sandbox only has to exist until the kubelet stops it (CRI kills it with SIGKILL).
PAUSE_ENTRYPOINT = ("/bin/sleep", "2147483647")


def busybox_binary() -> Path | None:
    """The static busybox, or None (a dynamic one would not run in an empty image)."""
    for candidate in (BUSYBOX, shutil.which("busybox") or ""):
        path = Path(candidate) if candidate else None
        if path is not None and path.is_file() and _static(path):
            return path
    return None


def _static(path: Path) -> bool:
    # An ELF executable with no PT_INTERP program header is statically linked.
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
            return False
        phoff = int.from_bytes(head[32:40], "little")
        phentsize = int.from_bytes(head[54:56], "little")
        phnum = int.from_bytes(head[56:58], "little")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    pt_interp = 3
    return all(
        int.from_bytes(table[i : i + 4], "little") != pt_interp
        for i in range(0, len(table), phentsize)
    )


def _layer(busybox: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
    return out.getvalue()


def write_image(
    path: Path,
    tags: Sequence[str],
    entrypoint: Sequence[str] = ("/bin/sh",),
    busybox: Path | None = None,
) -> Path:
    """Write a one-layer busybox image named tags to path (a docker-archive tarball)."""
    binary = busybox or busybox_binary()
    if binary is None:
        raise FileNotFoundError("no static busybox (Debian package busybox-static)")
    layer = _layer(binary)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": list(entrypoint), "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": list(tags), "Layers": [f"{layer_id}/layer.tar"]}]
    ).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in (
            (f"{layer_id}/layer.tar", layer),
            (config_name, config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
