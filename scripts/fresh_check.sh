#!/usr/bin/env bash
# Proves README command 1 (./scripts/quickstart.sh) on a fresh machine, one
# that a developer's installs cannot fool: a minimal Debian bookworm root made
# with debootstrap, a clean `git archive` of HEAD inside it, the quickstart run
# there under `env -i`. Passes only when the output shows the first process's
# cache miss and then the second process's cache hit.
#
# Usage: scripts/fresh_check.sh [--keep] [--no-ccache]
#   --keep       leave the root in place (its path is printed) for a look afterwards
#   --no-ccache  do not share this machine's ccache with the root (a cold build:
#                10-20 minutes on 2 cores instead of about 2)
#
# Needs root (debootstrap, chroot, mounts) and the network to Debian and PyPI.
#
# What the root gets from this machine, none of which is a project install step:
#  - the apt sources (the mirror this machine uses) and resolv.conf;
#  - the CA bundle that SSL_CERT_FILE / PIP_CERT name, copied to
#    /etc/kiln-fresh-ca.pem (the root's own ca-certificates package never
#    rewrites that path), with an /etc/pip.conf that holds only `cert`: without
#    them pip's downloads fail certificate verification on this network;
#  - unless --no-ccache, this machine's ccache directory, bind-mounted. ccache
#    only replays compiler outputs for identical preprocessed inputs: a header
#    or package missing from the root still fails (configure's find_package,
#    the preprocessor and the link all run for real), so sharing it saves the
#    cold compile without hiding a missing install step. The tree is placed at
#    the same path as here so that the cache keys (which include the working
#    directory of -g builds) match.
# The CUDA toolkit (/usr/local/cuda) belongs to this kind of machine and is no
# Debian package, so the root has none: the build there has no cuda target
# (said below), which is what a fresh Debian machine gets.
#
# The root and its mounts are removed on every exit, failure included (unless --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd -P)

KEEP=0
CCACHE=1
for a in "$@"; do
  case "$a" in
    --keep) KEEP=1 ;;
    --no-ccache) CCACHE=0 ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh_check: unknown argument '$a' (see --help)" >&2; exit 2 ;;
  esac
done

STEP="start"
fail() { echo "fresh_check: FAILED at step '$STEP': $*" >&2; exit 1; }
step() { STEP="$1"; echo "== fresh_check: $1 ($(date +%T))"; }
T0=$(date +%s)

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot and bind mounts)"
git -C "$SRC" rev-parse --verify -q HEAD >/dev/null || fail "'$SRC' is not a git checkout with a HEAD"
if ! git -C "$SRC" diff --quiet HEAD -- 2>/dev/null; then
  echo "fresh_check: note: uncommitted changes are not checked (the root gets HEAD, $(git -C "$SRC" rev-parse --short HEAD))"
fi

step "install debootstrap on this machine"
if ! command -v debootstrap >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || fail "apt-get update"
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null || fail "apt-get install debootstrap"
fi

# The mirror this machine's apt uses (deb822 .sources or a one-line list).
MIRROR=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
[ -n "$MIRROR" ] || MIRROR=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
[ -n "$MIRROR" ] || fail "no Debian mirror found in /etc/apt/sources.list{,.d}"

ROOT=$(mktemp -d /var/tmp/kiln-fresh.XXXXXX)
MOUNTS=()
cleanup() {
  local rc=$?
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount -R "${MOUNTS[$i]}" 2>/dev/null || umount -l "${MOUNTS[$i]}" 2>/dev/null || true
  done
  if grep -q " $ROOT" /proc/mounts; then
    # Never rm -rf through a mount that is still there (it would reach /dev or the ccache).
    echo "fresh_check: mounts remain under $ROOT; not removing it:" >&2
    grep " $ROOT" /proc/mounts >&2
    rc=1
  elif [ "$KEEP" = 1 ]; then
    echo "fresh_check: root kept at $ROOT"
  else
    rm -rf --one-file-system "$ROOT"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "debootstrap --variant=minbase bookworm from $MIRROR into $ROOT"
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 ||
  { tail -20 "$ROOT.debootstrap.log" >&2; rm -f "$ROOT.debootstrap.log"; fail "debootstrap"; }
rm -f "$ROOT.debootstrap.log"

step "network settings (apt sources, resolv.conf, CA bundle for pip)"
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  cp /etc/apt/sources.list.d/*.sources "$ROOT/etc/apt/sources.list.d/"
  : >"$ROOT/etc/apt/sources.list"
fi
for f in /etc/apt/apt.conf.d/99artifact-registry; do [ -f "$f" ] && cp "$f" "$ROOT/etc/apt/apt.conf.d/"; done
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
CA=${SSL_CERT_FILE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
CA_ENV=()
if [ -f "$CA" ]; then
  cp -L "$CA" "$ROOT/etc/kiln-fresh-ca.pem"
  printf '[global]\ncert = /etc/kiln-fresh-ca.pem\n' >"$ROOT/etc/pip.conf"
  CA_ENV=(SSL_CERT_FILE=/etc/kiln-fresh-ca.pem PIP_CERT=/etc/kiln-fresh-ca.pem)
fi

step "git archive HEAD ($(git -C "$SRC" rev-parse --short HEAD)) into $SRC inside the root"
mkdir -p "$ROOT$SRC"
git -C "$SRC" archive --format=tar HEAD | tar -x -C "$ROOT$SRC" || fail "git archive"

step "mount /proc, /sys, /dev"
for m in proc sys dev; do
  mount --rbind "/$m" "$ROOT/$m" || fail "mount --rbind /$m"
  MOUNTS+=("$ROOT/$m")
done
if [ "$CCACHE" = 1 ] && command -v ccache >/dev/null; then
  HOST_CCACHE=$(ccache -k cache_dir 2>/dev/null || true)
  if [ -n "$HOST_CCACHE" ]; then
    mkdir -p "$HOST_CCACHE" "$ROOT/root/.cache/ccache"
    mount --bind "$HOST_CCACHE" "$ROOT/root/.cache/ccache" || fail "mount --bind $HOST_CCACHE"
    MOUNTS+=("$ROOT/root/.cache/ccache")
    echo "fresh_check: sharing this machine's ccache ($HOST_CCACHE); --no-ccache for a cold build"
  fi
fi

if [ -d /usr/local/cuda ]; then
  echo "fresh_check: note: the root has no CUDA toolkit (/usr/local/cuda is part of this machine kind, not a Debian" \
    "package): its kiln is built without the cuda target"
fi

step "README command 1 (./scripts/quickstart.sh) in the root under env -i"
LOG="$ROOT/quickstart.log"
set +e
chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  "${CA_ENV[@]}" /bin/bash -c "cd '$SRC' && ./scripts/quickstart.sh" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || fail "./scripts/quickstart.sh exited $rc (output above)"

step "check the output: a cache miss, then a hit"
miss=$(grep -n '^cache: miss' "$LOG" | head -1 | cut -d: -f1)
hit=$(grep -n '^cache: hit' "$LOG" | head -1 | cut -d: -f1)
[ -n "$miss" ] || fail "no 'cache: miss' line from the first run"
[ -n "$hit" ] || fail "no 'cache: hit' line from the second run"
[ "$miss" -lt "$hit" ] || fail "the cache hit came before the miss"
echo "fresh_check: PASSED in $(($(date +%s) - T0)) s: README command 1 works on a fresh Debian bookworm root" \
  "(miss then hit)"
