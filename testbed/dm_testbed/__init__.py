"""dm's Kubernetes testbed: a real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler built from Debian's source package) with an emulated node layer that runs pods as
local processes in their own network and mount namespaces. See docs/testing.md."""
