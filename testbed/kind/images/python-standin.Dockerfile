# A stand-in for python:3.11-slim-bookworm where no registry serves it: Debian bookworm's python3 (3.11)
# on a base made offline. It carries the host's CA bundle for pip (PIP_CERT): egress TLS on such a
# machine is intercepted by a CA only the host trusts. scripts/kind/images.sh tags it with the name the
# Dockerfile builds FROM, so the Dockerfile stays as it is for machines with Docker Hub.
ARG BASE=dm.local/debian:bookworm-minbase
FROM ${BASE}
LABEL dev.dm.standin="python:3.11-slim-bookworm from Debian bookworm's python3"
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       python3 python3-venv python-is-python3 ca-certificates >/dev/null \
    && rm -rf /var/lib/apt/lists/*
COPY host-ca-bundle.crt /etc/ssl/certs/host-ca-bundle.crt
ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt
