# SPDX-License-Identifier: Apache-2.0
# The Linux aarch64 wheel, cross-compiled on an x86_64 machine and tested
# under emulation (docs/packaging.md). From the repository root, on a
# machine whose kernel runs aarch64 programs through qemu-user
# (binfmt_misc with the F flag: Debian's qemu-user-static, or
# `docker run --privileged --rm tonistiigi/binfmt --install arm64`):
#
#   docker build -f pip_package/cross.Dockerfile -o wheels .
#
# scripts/container_build.sh --arch arm64 runs it with buildah, on base
# images it makes from Debian's archive. Stages:
#   build  (BASE, x86_64): scripts/cross_build.sh, Debian's aarch64 cross
#          compiler and arm64 multiarch libraries -> /src/dist/*.whl;
#   test   (TEST_BASE, arm64, every program under qemu-user):
#          scripts/emulated_tests.sh, fresh venvs, the smoke tests and the
#          TF-free and TensorFlow test suites against the installed wheel;
#   last   the wheel and the test logs (tests.txt, tests.log, tests.rc).
ARG BASE=debian:bookworm
ARG TEST_BASE=arm64v8/debian:bookworm
FROM ${BASE} AS build
# The newest TensorFlow with aarch64 wheels on PyPI, and its distribution
# there (tensorflow-cpu has no aarch64 wheel).
ARG TF_VERSION=2.20.0
ARG TF_DISTRIBUTION=tensorflow
ARG PYTHON=python3
ENV REVERB_TF_CACHE=/cache
ENV REVERB_TF_BASE_PYTHON=${PYTHON}
COPY . /src
WORKDIR /src
RUN bash scripts/cross_build.sh --tf "${TF_VERSION}" --distribution "${TF_DISTRIBUTION}" dist

FROM ${TEST_BASE} AS test
ARG TF_VERSION=2.20.0
ARG TF_DISTRIBUTION=tensorflow
# smoke | tf-free | portable (auto): scripts/emulated_tests.sh.
ARG TESTS=auto
ENV REVERB_TF_CACHE=/cache
COPY . /src
COPY --from=build /src/dist/ /src/dist/
WORKDIR /src
RUN bash scripts/emulated_tests.sh dist "${TESTS}" "${TF_DISTRIBUTION}==${TF_VERSION}"

FROM scratch
COPY --from=test /src/dist/ /
