"""What dm's offline kind node image runs in place of the cluster add-ons Debian does not package:
cluster DNS (CoreDNS's job, `dns`) and, per node, pod networking and node-local volumes (kindnetd's
and the local-path provisioner's jobs, `node`). Each runs in a pod from the image
testbed/kind/images/addons.Dockerfile builds; see docs/testing.md."""
