#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go module proxy, for the real-control-plane tests
# (DESIGN.md §7.3) and for `make dev-cluster`. No prebuilt binary is downloaded.
#
#   kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver, built in a wrapper module that
#                   requires k8s.io/kubernetes at $GPU_BINDER_K8S_VERSION and replaces every
#                   staging module (read from that release's own go.mod) by its published
#                   v0.X.Y;
#   etcd            go.etcd.io/etcd/server/v3 (its main package) at the version that
#                   Kubernetes release pins in its go.mod.
#
# Output: $CACHE/controlplane/<k8s-version>/{kube-apiserver,etcd,VERSIONS}, where CACHE is
# $GPU_BINDER_CACHE or ~/.cache/gpu-binder. Idempotent: nothing is built when both binaries
# exist. Progress goes to stderr; the only line on stdout is the output directory, so
#   export KUBEBUILDER_ASSETS="$(scripts/build-controlplane.sh)"
# works. Options: --print-dir (print the directory, build nothing), --force (rebuild).
#
# Environment: GPU_BINDER_K8S_VERSION (default below), GPU_BINDER_CACHE, GOTOOLCHAIN
# (a release whose go.mod needs a newer Go than the local one: export GOTOOLCHAIN=go1.27.3),
# GOMODCACHE/GOCACHE (Go's defaults, outside the checkout).
set -euo pipefail

K8S_VERSION="${GPU_BINDER_K8S_VERSION:-v1.37.2}"
CACHE_ROOT="${GPU_BINDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-binder}"
OUT_DIR="$CACHE_ROOT/controlplane/$K8S_VERSION"
BUILD_ROOT="$CACHE_ROOT/build/$K8S_VERSION"

force=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) echo "$OUT_DIR"; exit 0 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-controlplane: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[build-controlplane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# A line every minute during the long, silent compile steps.
heartbeat_pid=""
start_heartbeat() {
  local what="$1" t0
  t0=$(date +%s)
  (
    while sleep 60 </dev/null >/dev/null 2>&1; do
      log "... still building $what ($(( $(date +%s) - t0 )) s so far)"
    done
  ) >/dev/null &
  heartbeat_pid=$!
}
stop_heartbeat() {
  if [[ -n "$heartbeat_pid" ]]; then
    kill "$heartbeat_pid" 2>/dev/null || true
    wait "$heartbeat_pid" 2>/dev/null || true
    heartbeat_pid=""
  fi
}
trap stop_heartbeat EXIT

have_binaries() { [[ -x "$OUT_DIR/kube-apiserver" && -x "$OUT_DIR/etcd" ]]; }

if [[ $force -eq 0 ]] && have_binaries; then
  log "kube-apiserver and etcd $K8S_VERSION already built in $OUT_DIR"
  echo "$OUT_DIR"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go or set KUBEBUILDER_ASSETS"
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
  || die "GPU_BINDER_K8S_VERSION must look like v1.X.Y, got '$K8S_VERSION'"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
K8S_MINOR="${BASH_REMATCH[1]}"

mkdir -p "$OUT_DIR" "$BUILD_ROOT"
# One build per version at a time (pytest sessions and a person may race).
exec 9>"$BUILD_ROOT/.lock"
if ! flock -n 9; then
  log "another build of $K8S_VERSION is running; waiting for it"
  flock 9
fi
if [[ $force -eq 0 ]] && have_binaries; then
  log "built by the other process in $OUT_DIR"
  echo "$OUT_DIR"
  exit 0
fi

export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
NICE=(nice -n 10)
LDFLAGS="-s -w"
start_all=$SECONDS

log "building the control plane for Kubernetes $K8S_VERSION with $(go version | cut -d' ' -f3-)"
log "this takes a while the first time (about 11 min of compiling on 2 cores); output: $OUT_DIR"

# --- Kubernetes' own go.mod: staging modules, etcd version, go/godebug lines ------------
log "fetching k8s.io/kubernetes@$K8S_VERSION go.mod from the module proxy"
k8s_mod="$(cd "$BUILD_ROOT" && GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -n "$k8s_mod" && -f "$k8s_mod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION"

mapfile -t staging < <(
  awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$k8s_mod" | sort -u)
[[ ${#staging[@]} -gt 0 ]] || die "no staging replace directives found in $k8s_mod"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$k8s_mod")"
[[ -n "$etcd_version" ]] || die "k8s.io/kubernetes $K8S_VERSION does not pin go.etcd.io/etcd/server/v3"
go_line="$(awk '$1 == "go" { print; exit }' "$k8s_mod")"
# godebug settings (single line or block) keep the apiserver's runtime behaviour as upstream.
godebug="$(awk '
  /^godebug[[:space:]]*\(/ { inblock = 1; print; next }
  inblock { print; if ($0 ~ /^\)/) inblock = 0; next }
  /^godebug[[:space:]]/ { print }' "$k8s_mod")"
log "${#staging[@]} staging modules replaced by $STAGING_VERSION; etcd pinned at $etcd_version"

# --- kube-apiserver ----------------------------------------------------------------------
apiserver_dir="$BUILD_ROOT/kube-apiserver"
mkdir -p "$apiserver_dir"
{
  echo "// Generated by scripts/build-controlplane.sh: builds k8s.io/kubernetes/cmd/kube-apiserver."
  echo "module gpu-binder.local/build/kube-apiserver"
  echo
  echo "$go_line"
  [[ -n "$godebug" ]] && { echo; echo "$godebug"; }
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $STAGING_VERSION"; done
  echo ")"
} >"$apiserver_dir/go.mod"
rm -f "$apiserver_dir/go.sum"

# What /version reports (as hack/lib/version.sh sets it); otherwise v0.0.0-master.
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
  version_ldflags+=" -X $pkg.gitMinor=${K8S_MINOR} -X $pkg.gitTreeState=clean"
  version_ldflags+=" -X $pkg.buildDate=$build_date"
done

t0=$SECONDS
log "[1/2] building kube-apiserver $K8S_VERSION (downloads modules, then compiles; the longest step)"
start_heartbeat kube-apiserver
(
  cd "$apiserver_dir"
  "${NICE[@]}" go build -trimpath -ldflags="$LDFLAGS $version_ldflags" \
    -o "$apiserver_dir/kube-apiserver.new" \
    k8s.io/kubernetes/cmd/kube-apiserver
) || die "building kube-apiserver failed (see the go output above)"
stop_heartbeat
log "[1/2] kube-apiserver built in $((SECONDS - t0)) s"

# --- etcd ---------------------------------------------------------------------------------
etcd_dir="$BUILD_ROOT/etcd"
mkdir -p "$etcd_dir"
etcd_go_line="$(cd "$etcd_dir" && GOFLAGS= go mod download -json \
  "go.etcd.io/etcd/server/v3@$etcd_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' \
  | xargs awk '$1 == "go" { print; exit }')"
{
  echo "// Generated by scripts/build-controlplane.sh: builds etcd (go.etcd.io/etcd/server/v3)."
  echo "module gpu-binder.local/build/etcd"
  echo
  echo "${etcd_go_line:-$go_line}"
  echo
  echo "require go.etcd.io/etcd/server/v3 $etcd_version"
} >"$etcd_dir/go.mod"
rm -f "$etcd_dir/go.sum"

t0=$SECONDS
log "[2/2] building etcd $etcd_version"
start_heartbeat etcd
(
  cd "$etcd_dir"
  "${NICE[@]}" go build -trimpath -ldflags="$LDFLAGS" -o "$etcd_dir/etcd.new" \
    go.etcd.io/etcd/server/v3
) || die "building etcd failed (see the go output above)"
stop_heartbeat
log "[2/2] etcd built in $((SECONDS - t0)) s"

# --- install atomically -------------------------------------------------------------------
mv -f "$etcd_dir/etcd.new" "$OUT_DIR/etcd"
mv -f "$apiserver_dir/kube-apiserver.new" "$OUT_DIR/kube-apiserver"
{
  echo "kubernetes $K8S_VERSION"
  echo "staging $STAGING_VERSION"
  echo "etcd $etcd_version"
  echo "go $(go env GOVERSION)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start_all)) s"
} >"$OUT_DIR/VERSIONS"
log "done in $((SECONDS - start_all)) s: $OUT_DIR/{kube-apiserver,etcd}"
echo "$OUT_DIR"
