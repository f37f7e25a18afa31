#!/usr/bin/env bash
# Install the Debian packages the real-node tests need (DESIGN.md §7.4), when missing:
#
#   containerd                   the container runtime the kubelet talks CRI to
#   runc                         the OCI runtime containerd starts containers with
#   busybox-static               one static binary: the test image and the sandbox (pause)
#                                image are built from it locally (no registry is reachable)
#   containernetworking-plugins  the CNI plugins containerd loads a network config from
#                                (the runtime reports NetworkReady only with one loaded)
#
# Idempotent and quick when everything is there (dpkg-query only). Needs root (apt-get).
# Options: --check (print what is missing, exit 1 if anything is, install nothing).
set -euo pipefail

PACKAGES=(containerd runc busybox-static containernetworking-plugins)

log() { printf '[install-node-packages] %s\n' "$*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  log "all installed: ${PACKAGES[*]}"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  log "missing: ${missing[*]}"
  exit 1
fi
[[ $(id -u) -eq 0 ]] || { log "ERROR: missing ${missing[*]}; run as root to install"; exit 1; }
command -v apt-get >/dev/null 2>&1 || { log "ERROR: missing ${missing[*]} and no apt-get"; exit 1; }

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
t0=$SECONDS
apt-get update -qq >&2
# --no-install-recommends: containerd recommends nothing the tests use. Package scripts
# may try to start containerd.service; the tests start their own containerd (own socket,
# state and config), so a system one is neither needed nor disturbed.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
log "installed in $((SECONDS - t0)) s"
