# SPDX-License-Identifier: Apache-2.0
# The container build's canary (scripts/container_check.sh, run by
# scripts/test.sh): the same base image, build arguments, buildah invocation,
# build context (HEAD filtered by Dockerfile.dockerignore) and `-o` export as
# pip_package/Dockerfile, with steps of seconds where the wheel build would
# start. It lists the files the context brought (a tracked file the ignore
# file drops breaks the wheel build: the check compares this list with
# `git ls-files`), installs Debian's python3 and venv (as scripts/setup.sh
# does), makes a venv with pip, and exports what the interpreter reports.
ARG BASE=debian:bookworm
FROM ${BASE} AS build
ARG PYTHON=python3
# Declared so that container_build.sh passes the Dockerfile's arguments
# unchanged; the probe does not use them.
ARG TF_VERSION=""
ARG TF_DISTRIBUTION=tensorflow-cpu
ARG TESTS=auto
COPY . /src
RUN set -eu; \
    mkdir /report; \
    (cd /src && find . -type f -printf '%P\n' | LC_ALL=C sort) > /report/files.txt; \
    apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3-venv >/dev/null; \
    "${PYTHON}" -m venv /tmp/venv; \
    /tmp/venv/bin/python -c 'import platform, sys; print(platform.python_version(), sys.prefix)' \
      > /report/python.txt; \
    /tmp/venv/bin/python -m pip --version > /report/pip.txt

FROM scratch
COPY --from=build /report/ /
