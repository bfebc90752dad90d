# kube-proxy v1.20.2 (built from Debian's source package) as kubeadm's DaemonSet runs it
# (/usr/local/bin/kube-proxy, privileged, host network), with the iptables and conntrack it calls.
# The binary is wrapped: the iptables backend (legacy or nft) is first set to the one the node uses.
ARG BASE=dm.local/debian:bookworm-minbase
FROM ${BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables conntrack >/dev/null \
    && rm -rf /var/lib/apt/lists/*
COPY select-iptables-mode /usr/local/bin/select-iptables-mode
COPY kube-proxy /usr/local/bin/kube-proxy.bin
RUN printf '#!/bin/sh\n/usr/local/bin/select-iptables-mode\nexec /usr/local/bin/kube-proxy.bin "$@"\n' \
      >/usr/local/bin/kube-proxy \
    && chmod 0755 /usr/local/bin/kube-proxy /usr/local/bin/select-iptables-mode
