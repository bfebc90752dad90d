# syntax=docker/dockerfile:1
# One image for dm: brokers and tools (`dm`, the default entrypoint) and the operator (`dm-operator`).
#   docker build -t dm:dev .
#   docker run --rm dm:dev --version
#   docker run --rm --entrypoint dm-operator dm:dev --help

# -- build: the same wheel `make wheel` builds, and its dependencies, into a virtualenv ---------------
FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY operator ./operator
COPY connectors ./connectors
# The tools that build and install (pip, build) live in a virtualenv of their own; the one that ships
# holds dm and its dependencies only. Trimmed from it: the kubernetes client's asyncio copy of itself
# (kubernetes/aio, 68 MB: dm uses the synchronous client).
RUN python -m venv /opt/tools \
    && /opt/tools/bin/pip install --quiet --no-compile "pip==25.1.1" "build==1.2.2.post1" \
    && /opt/tools/bin/python -m build --wheel --outdir /dist . \
    && python -m venv --without-pip /opt/dm \
    && /opt/tools/bin/pip --python /opt/dm/bin/python install --quiet --no-compile /dist/dm-*.whl \
    && rm -rf /opt/dm/lib/python3.11/site-packages/kubernetes/aio \
    && /opt/dm/bin/python -m compileall -q /opt/dm/lib

# -- run: the virtualenv on a slim Python, as a non-root user ---------------------------------------
FROM python:3.11.11-slim-bookworm
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="dm" \
      org.opencontainers.image.description="A Kafka-compatible streaming platform: brokers, tools and the Kubernetes operator" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/dm-dev/dm"
RUN groupadd --system --gid 10001 dm \
    && useradd --system --uid 10001 --gid dm --home-dir /var/lib/dm --create-home --shell /usr/sbin/nologin dm
COPY --from=build /opt/dm /opt/dm
# No bytecode writes at run time (the root file system is read-only in the pods); unbuffered logs.
ENV PATH=/opt/dm/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/dm
EXPOSE 9092 8080 9990
# Exec form: the broker or the operator is PID 1 and gets SIGTERM itself (both shut down cleanly
# on it: a broker hands its leaderships away first). No shell is involved.
ENTRYPOINT ["dm"]
CMD ["--help"]
