"""Names and labels of everything the operator creates for a DMCluster."""

from __future__ import annotations

import hashlib
import re

from . import API_VERSION

KAFKA_PORT = 9092
HTTP_PORT = 8080
DATA_PATH = "/var/lib/dm/data"
CONFIG_PATH = "/etc/dm"
CLUSTER_LABEL = "dm.dev/cluster"  # on Topics: which DMCluster they belong to
MANAGED_BY = "dm-operator"
MANAGED = {"app.kubernetes.io/managed-by": MANAGED_BY}  # on everything the operator creates
BROKER_PODS = {"app.kubernetes.io/name": "dm", "app.kubernetes.io/component": "broker"}


def statefulset(cluster: str) -> str:
    return f"{cluster}-broker"


def pod(cluster: str, broker_id: int) -> str:
    return f"{statefulset(cluster)}-{broker_id}"


def claim_prefix(cluster: str) -> str:
    """The StatefulSet's claims are named after its claim template ("data") and pod: data-<pod>."""
    return f"data-{statefulset(cluster)}-"


def claim(cluster: str, broker_id: int) -> str:
    return f"{claim_prefix(cluster)}{broker_id}"


def headless_service(cluster: str) -> str:
    return f"{cluster}-brokers"


def bootstrap_service(cluster: str) -> str:
    return f"{cluster}-bootstrap"


def config_map(cluster: str) -> str:
    return f"{cluster}-config"


def users_record(cluster: str) -> str:
    return f"{cluster}-users"


def token_secret(cluster: str) -> str:
    return f"{cluster}-controller-token"


def cluster_ca(cluster: str) -> str:
    return f"{cluster}-cluster-ca"  # ca.crt, ca.key (the operator's, or brought by the user)


def cluster_ca_cert(cluster: str) -> str:
    return f"{cluster}-cluster-ca-cert"  # ca.crt: what clients trust to verify the brokers


def clients_ca(cluster: str) -> str:
    return f"{cluster}-clients-ca"


def clients_ca_cert(cluster: str) -> str:
    return f"{cluster}-clients-ca-cert"


def broker_certs(cluster: str) -> str:
    return f"{cluster}-broker-certs"  # broker.pem: the brokers' key and certificate chain


def service_account(cluster: str) -> str:
    return f"{cluster}-broker"


def pdb(cluster: str) -> str:
    return f"{cluster}-broker"


def network_policy(cluster: str) -> str:
    return f"{cluster}-brokers"


def selector_labels(cluster: str, component: str = "broker") -> dict[str, str]:
    return {"app.kubernetes.io/name": "dm", "app.kubernetes.io/instance": cluster,
            "app.kubernetes.io/component": component}


def labels(cluster: str, component: str = "broker") -> dict[str, str]:
    return {**selector_labels(cluster, component), "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": "dm"}


def selector_string(cluster: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(cluster).items())


def broker_id_of(pod_name: str, cluster: str) -> int | None:
    """The broker id a pod of this cluster stands for (its StatefulSet ordinal)."""
    prefix = f"{statefulset(cluster)}-"
    rest = pod_name[len(prefix):] if pod_name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def owner_reference(cluster: str, uid: str) -> dict:
    return {"apiVersion": API_VERSION, "kind": "DMCluster", "name": cluster, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


_INVALID = re.compile(r"[^a-z0-9.-]+")


def topic_resource_name(topic: str, cluster: str, taken: bool = False) -> str:
    """A Topic resource name for a Kafka topic name: the topic itself when Kubernetes allows it,
    otherwise (or when that name belongs to something else) `<cluster>-<cleaned>-<hash>`."""
    plain = topic.lower() == topic and len(topic) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", topic)
    if plain and not taken:
        return topic
    cleaned = _INVALID.sub("-", topic.lower()).strip("-.") or "topic"
    digest = hashlib.sha256(f"{cluster}/{topic}".encode()).hexdigest()[:8]
    return f"{cluster}-{cleaned}"[:200].rstrip("-.") + f"-{digest}"
