# SPDX-License-Identifier: Apache-2.0
# The cp312-abi3 wheel for CPython 3.12 and later, built on Debian 12 so
# that it installs where glibc is 2.34 or newer (manylinux_2_34: Ubuntu
# 22.04, which hosted notebooks run with Python 3.12), and tested in a
# newer Debian's Python (docs/packaging.md). From the repository root:
#
#   docker build -f pip_package/abi3.Dockerfile -o wheels .
#
# scripts/container_build.sh --abi3 runs it with buildah, on base images it
# makes from Debian's archive. Stages:
#   headers (TEST_BASE, Debian 13: Python 3.13): python3-dev's headers;
#   build   (BASE, Debian 12: Python 3.11, glibc 2.36): scripts/setup.sh,
#           then build_wheel.sh with REVERB_TF_PYTHON_HEADERS pointing at
#           them: the extension compiled on the stable ABI with the 3.12
#           limit (Py_LIMITED_API), the op library against the build venv's
#           TensorFlow, whose C++ ABI is the same for every Python;
#   test    (TEST_BASE): fresh Python 3.13 venvs: the smoke tests with and
#           without TensorFlow and the pytest suite against the installed
#           wheel (scripts/check_wheel.sh);
#   last    the wheel and the test logs.
ARG BASE=debian:bookworm
ARG TEST_BASE=debian:trixie
FROM ${TEST_BASE} AS headers
RUN set -eu; \
    apt-get update -qq; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3-dev >/dev/null; \
    version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; \
    mkdir /headers; \
    cp -r "/usr/include/python${version}/." /headers/; \
    cp "/usr/include/$(uname -m)-linux-gnu/python${version}/pyconfig.h" /headers/pyconfig.h

FROM ${BASE} AS build
ARG TF_VERSION=""
ARG TF_DISTRIBUTION=tensorflow-cpu
ARG PYTHON=python3
ENV REVERB_TF_CACHE=/cache
ENV REVERB_TF_BASE_PYTHON=${PYTHON}
COPY . /src
COPY --from=headers /headers/ /python-headers/
WORKDIR /src
RUN set -eu; \
    bash scripts/setup.sh; \
    REVERB_TF_PYTHON_HEADERS=/python-headers bash scripts/build_wheel.sh --no-setup --no-check \
      --tf "${TF_VERSION}" --distribution "${TF_DISTRIBUTION}"; \
    mkdir /out; \
    cp "$(ls dist/reverb_tf-*.whl dist/tf-*/reverb_tf-*.whl 2>/dev/null | head -n 1)" /out/

FROM ${TEST_BASE} AS test
ARG TF_VERSION=""
ARG TF_DISTRIBUTION=tensorflow-cpu
# portable (auto): the smoke tests and the portable suite; smoke: only the
# smoke tests.
ARG TESTS=auto
ENV REVERB_TF_CACHE=/cache
COPY . /src
COPY --from=build /out/ /src/dist/
WORKDIR /src
RUN bash scripts/abi3_tests.sh dist "${TESTS}" "${TF_DISTRIBUTION}" "${TF_VERSION}"

FROM scratch
COPY --from=test /src/dist/ /
