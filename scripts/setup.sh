#!/usr/bin/env bash
# Idempotent set-up of the tfdist development environment.
#
#   bash scripts/setup.sh          # what `make setup` runs
#
# 1. Debian packages: the build tools Horovod needs (cmake, g++, libhighwayhash-dev, libfarmhash-dev),
#    what the multi-host tests' network lab runs (openssh-server, iproute2; slurm-wlm and munge for
#    its SLURM cluster), and chromium, the headless browser the tests render `tfdist report`'s page
#    and TensorBoard in.
# 2. A virtual environment in $VENV (default .venv) with the pinned stack from constraints.txt.
# 3. Horovod 0.28.1 built from its sdist against the installed TensorFlow (Gloo; NCCL when nvcc is
#    on PATH), cached as a wheel keyed by Horovod version, TensorFlow version and GPU flavour.
# 4. tfdist itself, editable, with its test extra (matplotlib, for `tfdist report`, is
#    one of its requirements, pinned with its dependencies in constraints.txt).
# 5. `horovodrun --check-build` must report TensorFlow and Gloo.
#
# A stamp in the venv records a hash of the inputs; when it matches, the script exits at once.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

PYTHON="${PYTHON:-python3.11}"
VENV="${VENV:-.venv}"
CACHE_DIR="${TFDIST_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist}"
STAMP="$VENV/.tfdist-setup"

quiet_pip() {  # run pip, dropping the machine's warnings about absent local mirrors
  "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

pinned_version() {  # pinned_version NAME -> the version constraints.txt pins
  local v
  v="$(grep -iE "^$1==" constraints.txt | head -n1 | cut -d= -f3)"
  [ -n "$v" ] || die "constraints.txt pins no version of $1; add a line '$1==X.Y.Z'"
  printf '%s' "$v"
}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  PYTHON=python3
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || die "tfdist's pinned stack needs Python 3.11; set PYTHON=/path/to/python3.11"
fi

HOROVOD_VERSION="$(pinned_version horovod)"
TF_VERSION="$(pinned_version tensorflow)"
shared_libs="$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null || true)"
if command -v nvcc >/dev/null 2>&1 && [[ "$shared_libs" == *libnccl* ]]; then
  FLAVOUR=nccl
else
  FLAVOUR=cpu
fi

inputs_hash="$(cat scripts/setup.sh constraints.txt setup.py | sha256sum | cut -c1-16)-$FLAVOUR"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$inputs_hash" ] && [ -x "$VENV/bin/python" ]; then
  log "environment in $VENV is up to date (delete $STAMP to force a rebuild)"
  exit 0
fi

# --- 1. Debian packages -------------------------------------------------------------------
apt_packages=(cmake g++ libhighwayhash-dev libfarmhash-dev openssh-server iproute2 chromium slurm-wlm munge)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=(env DEBIAN_FRONTEND=noninteractive)
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo env DEBIAN_FRONTEND=noninteractive)
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- 2. virtual environment and pinned stack ------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
pip=(quiet_pip "$VENV/bin/python" -m pip --disable-pip-version-check)
log "installing the pinned stack (tensorflow $TF_VERSION, tf-keras, tensorboard, ...)"
"${pip[@]}" install -q -c constraints.txt pip setuptools wheel
"${pip[@]}" install -q -c constraints.txt tensorflow tf-keras

# --- 3. Horovod, built once per (horovod, tensorflow, flavour) ------------------------------
wheel_dir="$CACHE_DIR/wheels/horovod-$HOROVOD_VERSION-tf$TF_VERSION-$FLAVOUR"
installed_hvd="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("horovod"))' 2>/dev/null || true)"
if [ "$installed_hvd" != "$HOROVOD_VERSION" ]; then
  if ! ls "$wheel_dir"/horovod-*.whl >/dev/null 2>&1; then
    log "building Horovod $HOROVOD_VERSION against TensorFlow $TF_VERSION ($FLAVOUR); takes a few minutes"
    "$VENV/bin/python" scripts/horovod_shims.py "$CACHE_DIR/shims"
    build_tmp="$(mktemp -d)"
    trap 'rm -rf "$build_tmp"' EXIT
    build_env=(
      HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
      "CPLUS_INCLUDE_PATH=$CACHE_DIR/shims${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
      "MAKEFLAGS=-j$(nproc)"
    )
    [ "$FLAVOUR" = nccl ] && build_env+=(HOROVOD_GPU_OPERATIONS=NCCL)
    # --no-cache-dir: pip's own wheel cache would hand back a wheel built with other flags.
    (export "${build_env[@]}"
     "${pip[@]}" wheel -q --no-cache-dir --no-build-isolation --no-deps --no-binary horovod \
       -w "$build_tmp" "horovod==$HOROVOD_VERSION") \
      || die "the Horovod build failed; see the compiler output above"
    mkdir -p "$wheel_dir"
    # Move into place only once complete, so an interrupted build never leaves a broken cache.
    for whl in "$build_tmp"/horovod-*.whl; do
      mv "$whl" "$wheel_dir/.$(basename "$whl").part"
      mv "$wheel_dir/.$(basename "$whl").part" "$wheel_dir/$(basename "$whl")"
    done
  else
    log "using the cached Horovod wheel in $wheel_dir"
  fi
  "${pip[@]}" install -q -c constraints.txt "$wheel_dir"/horovod-*.whl
fi

# --- 4. tfdist itself ------------------------------------------------------------------------
log "installing tfdist (editable) with its test extra"
"${pip[@]}" install -q -c constraints.txt --no-build-isolation -e '.[test]'

# Packages earlier versions of this environment pinned and it no longer does: an existing venv drops them
# (Keras 3 imports scikit-learn, and with it scipy, at start-up whenever it is installed).
DROPPED=(scikit-learn scipy joblib threadpoolctl)
present="$("${pip[@]}" list --format=freeze 2>/dev/null | cut -d= -f1 | grep -ixF -f <(printf '%s\n' "${DROPPED[@]}") || true)"
if [ -n "$present" ]; then
  log "removing packages no longer pinned: $(echo $present)"
  "${pip[@]}" uninstall -q -y $present
fi

# --- 5. verify the Horovod build --------------------------------------------------------------
venv_bin="$(cd "$VENV/bin" && pwd)"
check="$(PATH="$venv_bin:$PATH" "$venv_bin/horovodrun" --check-build 2>&1)" \
  || die "horovodrun --check-build failed: $check"
printf '%s\n' "$check" | grep -qE '\[X\] TensorFlow' \
  || die "Horovod was built without TensorFlow support; delete $wheel_dir and run again"
printf '%s\n' "$check" | grep -qE '\[X\] Gloo' \
  || die "Horovod was built without Gloo; delete $wheel_dir and run again"
log "horovodrun --check-build: TensorFlow and Gloo enabled"

printf '%s' "$inputs_hash" > "$STAMP"
log "done: activate with 'source $VENV/bin/activate'"
