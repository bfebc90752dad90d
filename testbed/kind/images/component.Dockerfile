# One Kubernetes control plane component (kube-apiserver, kube-controller-manager, kube-scheduler)
# built from Debian's source package, as the image kubeadm runs it from: the binary on PATH.
ARG BASE=dm.local/debian:bookworm-minbase
FROM ${BASE}
ARG BINARY
COPY ${BINARY} /usr/local/bin/${BINARY}
