"""The emulated node layer: a kubelet that runs the pods bound to its nodes as local processes."""
