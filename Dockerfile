# syntax=docker/dockerfile:1
# trainlog-exporter image: docker build -t trainlog-exporter:0.1.0 .
#
# Stage 1 builds the project's wheel (with its C kernels) and the wheels of its
# dependencies; stage 2 installs them into a virtual environment with no network and no
# compiler, so the final image carries neither build tools nor the source tree. tests/test_wheel_install.py runs the
# same two steps (wheel, fresh venv, console script) because CI has no Docker engine.
#
# Reproducible: the base image is pinned by digest, and every Python package (runtime
# dependencies and the build backend) by constraints.txt (scripts/lock_constraints.py).
# The digest is the multi-platform index of python:3.11-slim-bookworm (Python 3.11.16,
# Debian 12, built 2026-08-25) as docker-library/repo-info lists it in
# repos/python/remote/3.11-slim-bookworm.md (commit bc9bbb47fc70); it was not pulled and
# checked here (no Docker engine). To update: docker buildx imagetools inspect
# python:3.11-slim-bookworm, and put the index digest it prints below.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:fe556eaffd0d96abd8685b83bb8a69addd0dc730fa193669a7df0d49ddcfac02

FROM ${PYTHON_IMAGE} AS build
# A C compiler for the native kernels (exporter/native/*.c), in this stage only. Debian's
# stable releases ship one gcc version: pinning it would only break the build at updates.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE constraints.txt ./
COPY exporter ./exporter
# The kernels are optional for pip (a machine without a compiler still installs the
# package), not for the image: the build fails if the wheel lacks one. PIP_CONSTRAINT, not
# --constraint: the isolated build environment (setuptools) is held to it too. The final
# stage installs from these wheels alone, so it gets exactly these versions.
RUN PIP_CONSTRAINT=/src/constraints.txt pip wheel --no-cache-dir --wheel-dir /wheels . \
 && python -c "import glob, sys, zipfile; names = zipfile.ZipFile(glob.glob('/wheels/trainlog_exporter-*.whl')[0]).namelist(); sys.exit(0 if sum(name.startswith('exporter/native/_') and name.endswith('.so') for name in names) == 3 else 'native kernels missing from the wheel')"

FROM ${PYTHON_IMAGE}
# uid/gid 65532: the conventional "nonroot" id, so runAsNonRoot holds without a passwd entry.
ARG UID=65532
# Python writes nothing at run time: no bytecode cache (the venv is compiled at install),
# unbuffered logs. Together with the read-only venv this lets the container run with a
# read-only root filesystem.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/trainlog-exporter/bin:$PATH
# /logs is the default mount point of the log volume; it is owned by the app user so that a
# fresh named volume (docker compose) is writable by `simulate`.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/trainlog-exporter \
 && /opt/trainlog-exporter/bin/pip install --no-cache-dir --no-index --find-links=/wheels trainlog-exporter \
 && mkdir /logs \
 && chown ${UID}:${UID} /logs
USER ${UID}:${UID}
WORKDIR /logs
EXPOSE 10042
# The default listen address is :10042; change the port here too if you change it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:10042/-/healthy', timeout=4)"]
ENTRYPOINT ["trainlog-exporter"]
CMD ["--log-dir", "/logs"]
