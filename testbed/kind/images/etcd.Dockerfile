# etcd for kubeadm's static pod: Debian bookworm's etcd-server (3.4), the binary on PATH.
ARG BASE=dm.local/debian:bookworm-minbase
FROM ${BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && cp /usr/bin/etcd /usr/local/bin/etcd
