#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go module proxy, for the real-control-plane tests
# (DESIGN.md §7.3) and for `make dev-cluster`; with --node also the node path's components
# (§7.4). No prebuilt binary is downloaded.
#
#   kube-apiserver  k8s.io/kubernetes/cmd/kube-apiserver, built in a wrapper module that
#                   requires k8s.io/kubernetes at $GPU_BINDER_K8S_VERSION and replaces every
#                   staging module (read from that release's own go.mod) by its published
#                   v0.X.Y;
#   etcd            go.etcd.io/etcd/server/v3 (its main package) at the version that
#                   Kubernetes release pins in its go.mod;
#   --node: kube-scheduler, kube-controller-manager, kubelet
#                   k8s.io/kubernetes/cmd/<name> in the same wrapper module as the apiserver
#                   (one module set, so Go's build cache shares every common package);
#           kwok    sigs.k8s.io/kwok/cmd/kwok at $GPU_BINDER_KWOK_VERSION, in a wrapper
#                   module of its own (KWOK pins its own client-go).
#
# Output: $CACHE/controlplane/<k8s-version>/{kube-apiserver,etcd,...,VERSIONS}, where CACHE
# is $GPU_BINDER_CACHE or ~/.cache/gpu-binder. Idempotent: only missing binaries are built.
# Progress goes to stderr; the only line on stdout is the output directory, so
#   export KUBEBUILDER_ASSETS="$(scripts/build-controlplane.sh)"
# works. Options: --print-dir (print the directory, build nothing), --force (rebuild),
# --node (also the node components).
#
# Environment: GPU_BINDER_K8S_VERSION, GPU_BINDER_KWOK_VERSION (defaults below; keep them
# in step with gpu_binder.envtest.assets), GPU_BINDER_CACHE, GOTOOLCHAIN
# (a release whose go.mod needs a newer Go than the local one: export GOTOOLCHAIN=go1.27.3),
# GOMODCACHE/GOCACHE (Go's defaults, outside the checkout).
set -euo pipefail

K8S_VERSION="${GPU_BINDER_K8S_VERSION:-v1.37.2}"
KWOK_VERSION="${GPU_BINDER_KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${GPU_BINDER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-binder}"
OUT_DIR="$CACHE_ROOT/controlplane/$K8S_VERSION"
BUILD_ROOT="$CACHE_ROOT/build/$K8S_VERSION"

force=0
node=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) echo "$OUT_DIR"; exit 0 ;;
    --force) force=1 ;;
    --node) node=1 ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

CONTROL_PLANE=(kube-apiserver etcd)
NODE=(kube-scheduler kube-controller-manager kubelet kwok)
WANTED=("${CONTROL_PLANE[@]}")
[[ $node -eq 1 ]] && WANTED+=("${NODE[@]}")

# needs NAME: whether this run builds NAME (wanted, and missing or --force).
needs() {
  local w
  for w in "${WANTED[@]}"; do
    if [[ "$w" == "$1" ]]; then
      # kwok is of no use without the stages it plays, installed beside it.
      [[ $force -eq 1 || ! -x "$OUT_DIR/$1" || ( "$1" == kwok && ! -d "$OUT_DIR/kwok-stages" ) ]]
      return
    fi
  done
  return 1
}
have_binaries() {
  local w
  for w in "${WANTED[@]}"; do needs "$w" && return 1; done
  return 0
}

if have_binaries; then
  log "${WANTED[*]} $K8S_VERSION already built in $OUT_DIR"
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
# Another process may have built them while we waited (--force rebuilds anyway).
if have_binaries; then
  log "built by the other process in $OUT_DIR"
  echo "$OUT_DIR"
  exit 0
fi

export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
NICE=(nice -n 10)
LDFLAGS="-s -w"
start_all=$SECONDS
todo=()
for w in "${WANTED[@]}"; do needs "$w" && todo+=("$w"); done
step=0

log "building ${todo[*]} for Kubernetes $K8S_VERSION with $(go version | cut -d' ' -f3-)"
log "this takes a while the first time (on 2 cores about 11 min for kube-apiserver and etcd," \
  "about 25 min more for the node components); output: $OUT_DIR"

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
# godebug settings (single line or block) keep the components' runtime behaviour as upstream.
godebug="$(awk '
  /^godebug[[:space:]]*\(/ { inblock = 1; print; next }
  inblock { print; if ($0 ~ /^\)/) inblock = 0; next }
  /^godebug[[:space:]]/ { print }' "$k8s_mod")"
log "${#staging[@]} staging modules replaced by $STAGING_VERSION; etcd pinned at $etcd_version"

# --- the Kubernetes components: one wrapper module for all of them ----------------------
k8s_dir="$BUILD_ROOT/kubernetes"
mkdir -p "$k8s_dir"
{
  echo "// Generated by scripts/build-controlplane.sh: builds k8s.io/kubernetes/cmd/*."
  echo "module gpu-binder.local/build/kubernetes"
  echo
  echo "$go_line"
  [[ -n "$godebug" ]] && { echo; echo "$godebug"; }
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m $STAGING_VERSION"; done
  echo ")"
} >"$k8s_dir/go.mod"
rm -f "$k8s_dir/go.sum"

# What /version reports (as hack/lib/version.sh sets it); otherwise v0.0.0-master.
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
  version_ldflags+=" -X $pkg.gitMinor=${K8S_MINOR} -X $pkg.gitTreeState=clean"
  version_ldflags+=" -X $pkg.buildDate=$build_date"
done

# Each binary is built to NAME.new and moved into OUT_DIR at the end, all at once.
built=()
timings=()

# build_main NAME DIR PACKAGE LDFLAGS: go build PACKAGE in the wrapper module DIR.
build_main() {
  local name="$1" dir="$2" package="$3" ldflags="$4" t0=$SECONDS
  step=$((step + 1))
  log "[$step/${#todo[@]}] building $name"
  start_heartbeat "$name"
  (
    cd "$dir"
    "${NICE[@]}" go build -trimpath -ldflags="$ldflags" -o "$dir/$name.new" "$package"
  ) || die "building $name failed (see the go output above)"
  stop_heartbeat
  log "[$step/${#todo[@]}] $name built in $((SECONDS - t0)) s"
  built+=("$dir/$name")
  timings+=("$name $((SECONDS - t0))")
}

# kube-apiserver first: it downloads most modules, and the others reuse its packages.
for name in kube-apiserver kube-scheduler kube-controller-manager kubelet; do
  if needs "$name"; then
    build_main "$name" "$k8s_dir" "k8s.io/kubernetes/cmd/$name" "$LDFLAGS $version_ldflags"
  fi
done

# --- etcd ---------------------------------------------------------------------------------
if needs etcd; then
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
  build_main etcd "$etcd_dir" go.etcd.io/etcd/server/v3 "$LDFLAGS"
fi

# --- kwok ---------------------------------------------------------------------------------
if needs kwok; then
  kwok_dir="$BUILD_ROOT/kwok"
  mkdir -p "$kwok_dir"
  kwok_go_line="$(cd "$kwok_dir" && GOFLAGS= go mod download -json \
    "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' \
    | xargs awk '$1 == "go" { print; exit }')"
  [[ -n "$kwok_go_line" ]] || die "could not download sigs.k8s.io/kwok@$KWOK_VERSION"
  {
    echo "// Generated by scripts/build-controlplane.sh: builds sigs.k8s.io/kwok/cmd/kwok."
    echo "module gpu-binder.local/build/kwok"
    echo
    echo "$kwok_go_line"
    echo
    echo "require sigs.k8s.io/kwok $KWOK_VERSION"
  } >"$kwok_dir/go.mod"
  rm -f "$kwok_dir/go.sum"
  build_main kwok "$kwok_dir" sigs.k8s.io/kwok/cmd/kwok "$LDFLAGS"
  # The standalone kwok plays only the stages it is given (kwokctl embeds these): nodes
  # initialized and heartbeating with a lease, pods made ready, completed and deleted.
  kwok_src="$(cd "$kwok_dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  rm -rf "$kwok_dir/kwok-stages" && mkdir -p "$kwok_dir/kwok-stages"
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    cp "$kwok_src/kustomize/stage/$f.yaml" "$kwok_dir/kwok-stages/"
  done
  chmod -R u+w "$kwok_dir/kwok-stages"
fi

# --- install atomically -------------------------------------------------------------------
for b in "${built[@]}"; do mv -f "$b.new" "$OUT_DIR/$(basename "$b")"; done
if needs kwok; then
  rm -rf "$OUT_DIR/kwok-stages" && cp -r "$kwok_dir/kwok-stages" "$OUT_DIR/kwok-stages"
fi
{
  echo "kubernetes $K8S_VERSION"
  echo "staging $STAGING_VERSION"
  echo "etcd $etcd_version"
  echo "kwok $KWOK_VERSION"
  echo "go $(go env GOVERSION)"
  # What earlier runs built stays listed: each line says when a binary was built, and how
  # long its `go build` took on this machine (the first one also fetched the modules).
  if [[ -f "$OUT_DIR/VERSIONS" ]]; then
    grep '^built [a-z]' "$OUT_DIR/VERSIONS" | grep -v -F -f <(printf 'built %s \n' "${todo[@]}") || true
  fi
  for t in "${timings[@]}"; do
    echo "built ${t%% *} $(date -u +%Y-%m-%dT%H:%M:%SZ) in ${t##* } s"
  done
} >"$OUT_DIR/VERSIONS.new"
mv -f "$OUT_DIR/VERSIONS.new" "$OUT_DIR/VERSIONS"
log "done in $((SECONDS - start_all)) s (${timings[*]/%/ s}): $OUT_DIR"
echo "$OUT_DIR"
