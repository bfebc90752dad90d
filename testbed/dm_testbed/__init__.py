"""dm's Kubernetes test infrastructure: a real control plane for tests that need an API server
and no nodes (etcd, kube-apiserver and kube-controller-manager built from Debian's source package,
run as local processes), and the add-ons of the offline kind node image (`addons`). See
docs/testing.md."""
