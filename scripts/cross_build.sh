#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Linux aarch64 wheel on an x86_64 Debian 12 machine with Debian's
# cross compiler, for pip_package/cross.Dockerfile (scripts/container_build.sh
# --arch arm64 runs it in a bookworm build root, never on the host: it adds
# the arm64 architecture to dpkg and installs arm64 -dev packages).
#
#   bash scripts/cross_build.sh [--tf VERSION] [--distribution NAME] [OUTDIR]
#
# Why cross-compiling and not an arm64 build root under qemu-user: measured
# on the 2-core machine (docs/packaging.md), the emulated native build runs
# Bazel's JVM and every GCC under qemu (several times slower each), while
# the cross build runs natively and only the tests need emulation.
#
#   1. Debian packages: the amd64 tools Bazel runs (Bazel 4.2.3, protoc and
#      grpc_cpp_plugin 1.51, cmake, python3-venv), crossbuild-essential-arm64
#      (aarch64-linux-gnu-gcc 12) and the arm64 -dev packages of what the
#      wheel links (gRPC, OpenSSL, protobuf, absl, re2, c-ares, zlib, zstd,
#      Python 3.11's headers), from Debian's multiarch archive;
#   2. the PIC protobuf and the static libmicrohttpd, cross-compiled from
#      Debian's sources (build_protobuf_pic.sh, build_microhttpd.sh with
#      REVERB_TF_CROSS=aarch64-linux-gnu);
#   3. a build venv (x86_64) with the binding library's pin (its headers and
#      sources), `packaging` and the same TensorFlow for x86_64, which only
#      runs the genrules that read TensorFlow's struct.proto descriptors;
#   4. the aarch64 TensorFlow wheel from PyPI (pip download --platform),
#      unpacked: the op library compiles against its headers and links its
#      libtensorflow_framework.so.2 (third_party/tensorflow/local_tensorflow.bzl);
#   5. bazel run //pip_package:build_pip_package with the cross toolchain
#      (third_party/toolchains/aarch64), an output base of its own, and
#      REVERB_TF_WHEEL_PLATFORM=linux_aarch64: auditwheel (on x86_64) vendors
#      the arm64 absl and re2 and gives the manylinux aarch64 tag.
# Writes OUTDIR (default dist/)/*.whl and OUTDIR/build_info.txt (the
# TensorFlow compile flags used, checked by the emulated tests against
# tf.sysconfig, and the step times).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${REVERB_TF_CACHE:-${HOME}/.cache/reverb_tf}"
PYTHON="${REVERB_TF_BASE_PYTHON:-python3}"
TRIPLET=aarch64-linux-gnu
log() { printf '[cross_build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The newest TensorFlow with manylinux aarch64 wheels on PyPI; its pip
# distribution for aarch64 is `tensorflow` (tensorflow-cpu has none).
tf_version="2.20.0"; distribution="tensorflow"; out="dist"
while (( $# )); do
  case "$1" in
    --tf) tf_version="$2"; shift 2 ;;
    --distribution) distribution="$2"; shift 2 ;;
    -*) echo "usage: cross_build.sh [--tf VERSION] [--distribution NAME] [OUTDIR]" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
# tf.sysconfig.get_compile_flags() of tensorflow 2.20.0 on aarch64 (asked
# under emulation; the emulated test compares them again with the installed
# TensorFlow's and fails on a difference).
TF_CFLAGS="-D_GLIBCXX_USE_CXX11_ABI=1 --std=c++17 -DEIGEN_MAX_ALIGN_BYTES=64"

timings=()
step_start=${SECONDS}
step() { timings+=("$1: $(( SECONDS - step_start )) s"); step_start=${SECONDS}; }

APT_PACKAGES=(
  bazel-bootstrap bazel-bootstrap-source
  g++ pkg-config cmake dpkg-dev file
  protobuf-compiler protobuf-compiler-grpc
  python3-venv python3-dev
  crossbuild-essential-arm64
  libgrpc++-dev:arm64 libprotobuf-dev:arm64 libssl-dev:arm64
  libabsl-dev:arm64 libre2-dev:arm64 libc-ares-dev:arm64 zlib1g-dev:arm64
  libzstd-dev:arm64 libpython3.11-dev:arm64
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if [[ "$(dpkg-query -W -f='${db:Status-Status}' "${pkg}" 2>/dev/null)" != "installed" ]]; then
    missing+=("${pkg}")
  fi
done
if (( ${#missing[@]} )); then
  log "installing Debian packages: ${missing[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
step "Debian packages"

PROTOBUF_PIC="${CACHE}/cross-arm64/protobuf-pic"
MICROHTTPD="${CACHE}/cross-arm64/microhttpd"
REVERB_TF_CROSS="${TRIPLET}" bash "${ROOT}/scripts/build_protobuf_pic.sh" "${PROTOBUF_PIC}"
step "PIC protobuf (${TRIPLET})"
REVERB_TF_CROSS="${TRIPLET}" bash "${ROOT}/scripts/build_microhttpd.sh" "${MICROHTTPD}"
step "libmicrohttpd (${TRIPLET})"

# The build venv: what Bazel's repository rules and genrules run.
pins="$(mktemp)"
trap 'rm -f "${pins}"' EXIT
bash "${ROOT}/scripts/pins.sh" "${PYTHON}" > "${pins}"
build_pins=("tensorflow-cpu==${tf_version}")
mapfile -t -O 1 build_pins < <(grep -iE '^(pybind11|nanobind|packaging)==' "${pins}")
venv="${CACHE}/cross-arm64/venv-${tf_version}"
if [[ "$(cat "${venv}/.installed" 2>/dev/null)" != "${build_pins[*]}" ]]; then
  log "build venv ${venv}: ${build_pins[*]}"
  rm -rf "${venv}"
  "${PYTHON}" -m venv "${venv}"
  "${venv}/bin/pip" install -q --disable-pip-version-check "${build_pins[@]}"
  echo "${build_pins[*]}" > "${venv}/.installed"
fi
step "build venv"

target_tf="${CACHE}/cross-arm64/${distribution}-${tf_version}-aarch64"
if [[ ! -f "${target_tf}/.complete" ]]; then
  log "downloading ${distribution}==${tf_version} for manylinux aarch64"
  rm -rf "${target_tf}"
  mkdir -p "${target_tf}/wheel"
  "${venv}/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux2014_aarch64 --python-version "$("${PYTHON}" -c \
      'import sys; print("%d.%d" % sys.version_info[:2])')" \
    -d "${target_tf}/wheel" "${distribution}==${tf_version}"
  # Only what the op library compiles and links against, and the metadata.
  (cd "${target_tf}" && unzip -q wheel/*.whl 'tensorflow/include/*' \
     'tensorflow/libtensorflow_framework.so.2' '*.dist-info/*' && rm -rf wheel)
  touch "${target_tf}/.complete"
fi
step "aarch64 TensorFlow headers"

cd "${ROOT}"
bazel_startup=(--output_base="${CACHE}/cross-arm64/bazel")
bazel_flags=(
  --noshow_progress --ui_event_filters=-info,-debug --symlink_prefix=/
  --crosstool_top=//third_party/toolchains/aarch64:toolchain --cpu=aarch64
  --host_crosstool_top=@bazel_tools//tools/cpp:toolchain
  --repo_env=REVERB_TF_PYTHON="${venv}/bin/python"
  --repo_env=REVERB_TF_PROTOBUF_PIC="${PROTOBUF_PIC}"
  --repo_env=REVERB_TF_MICROHTTPD="${MICROHTTPD}"
  --repo_env=REVERB_TF_TARGET_MULTIARCH="${TRIPLET}"
  --repo_env=REVERB_TF_TARGET_TENSORFLOW="${target_tf}"
  --repo_env=REVERB_TF_TARGET_TENSORFLOW_CFLAGS="${TF_CFLAGS}"
  --disk_cache="${CACHE}/bazel-disk"
)
trap 'rm -f "${pins}"; bazel "${bazel_startup[@]}" shutdown 2>/dev/null || true' EXIT
log "bazel build for ${TRIPLET} against ${distribution} ${tf_version}"
bazel "${bazel_startup[@]}" build "${bazel_flags[@]}" //pip_package:build_pip_package
step "bazel build (${TRIPLET})"
wheel="$(REVERB_TF_WHEEL_PLATFORM=linux_aarch64 bazel "${bazel_startup[@]}" run \
           "${bazel_flags[@]}" //pip_package:build_pip_package -- "${out}" | tail -n 1)"
step "wheel"
for f in $(unzip -Z1 "${wheel}" | grep -E '(\.so|reverb_tf_server)$' | grep -v '\.libs/'); do
  unzip -p "${wheel}" "${f}" > "${out}/.elf" && echo "${f}: $(file -b "${out}/.elf" | cut -d, -f1-2)"
done | tee "${out}/elf.txt" >&2
rm -f "${out}/.elf"
if grep -v 'ARM aarch64' "${out}/elf.txt"; then
  echo "the wheel holds native files that are not aarch64 (above)" >&2
  exit 1
fi
{
  echo "wheel: $(basename "${wheel}") ($(stat -c %s "${wheel}") bytes)"
  echo "tensorflow: ${distribution}==${tf_version}"
  echo "tf_cflags: ${TF_CFLAGS}"
  echo "times: $(printf '%s; ' "${timings[@]}")"
} > "${out}/build_info.txt"
log "built ${wheel}: $(du -h "${wheel}" | cut -f1); $(printf '%s; ' "${timings[@]}")"
