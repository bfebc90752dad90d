"""dm's Kubernetes operator: DMCluster and Topic resources reconciled by kopf, the cluster
controller hosted inside with its state in the resources' status."""

GROUP = "dm.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
