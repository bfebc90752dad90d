"""Pure builders: a DMCluster (and what the operator knows) in, its children's manifests out.

StatefulSet (one PVC per broker, OnDelete updates — the operator rolls —, probes on /readyz and
/healthz, anti-affinity across nodes and spread across zones, non-root with a read-only root file
system), headless and bootstrap Services, ConfigMap, ServiceAccount, PodDisruptionBudget; each owned
by the DMCluster so deleting it removes them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dm_broker.config import BROKER_PROPERTIES, BrokerConfig, ConfigError

from . import controller_tls, listeners, naming
from .models import DMClusterSpec, Resources
from .objects import Obj
from .settings import OperatorSettings

BROKER_UID = 10001
# Where a Prometheus without the Prometheus Operator finds broker metrics (its kubernetes_sd examples
# read these); the chart's PodMonitor is the other way. Not in the revision: no restart for them.
SCRAPE_ANNOTATIONS = {"prometheus.io/scrape": "true", "prometheus.io/port": str(naming.HTTP_PORT),
                      "prometheus.io/path": "/metrics"}
# A broker without requests would be BestEffort: the first pod evicted under node pressure.
DEFAULT_REQUESTS = {"cpu": "250m", "memory": "512Mi"}
# Set by the operator from the pod's identity; a DMCluster may not set them.
MANAGED_PROPERTIES = {"node.id", "log.dirs", "listener.host", "listener.port", "http.port", "advertised.host",
                      "advertised.port", "controller.url", "controller.token", "rack",
                      # from spec.listeners and spec.authorization (listeners.py)
                      "listeners", "advertised.listeners", "listener.security.protocol.map",
                      "inter.broker.listener.name", "security.inter.broker.protocol", "authorizer.class.name",
                      "super.users", "sasl.enabled.mechanisms", "ssl.keystore.location", "ssl.keystore.type",
                      "ssl.truststore.location", "ssl.truststore.type", "ssl.client.auth", "ssl.keystore.key",
                      "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "ssl.keystore.password",
                      "ssl.key.password", "ssl.truststore.password", "sasl.jaas.config",
                      # from spec.http (listeners.http_properties)
                      "http.listeners", "http.advertised.listeners", "http.authentication.method"}


def render_config(config: dict[str, Any], managed: dict[str, str] | None = None) -> str:
    """broker.properties from spec.config, validated with the broker's own property table, and the
    properties the operator sets (`managed`: listeners, TLS, authorization); ConfigError names every
    unknown or invalid property."""
    problems = []
    values: dict[str, str] = {}
    for key, raw in sorted(config.items()):
        if key in MANAGED_PROPERTIES:
            problems.append(f"{key} is set by the operator")
            continue
        if isinstance(raw, bool):
            value = "true" if raw else "false"
        elif isinstance(raw, (int, float, str)):
            value = str(raw)
        else:
            problems.append(f"{key}: expected a string, number or boolean, got {type(raw).__name__}")
            continue
        if key not in BROKER_PROPERTIES:
            problems.append(f"{key} is not a dm broker property")
            continue
        try:
            BROKER_PROPERTIES[key].parse(value)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        values[key] = value
    if not problems:
        try:  # what holds between properties (queued.max.request.bytes >= socket.request.max.bytes, ...)
            BrokerConfig.build(values, environ={})
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("; ".join(problems))
    values.update(managed or {})
    return "".join(f"{k}={v}\n" for k, v in values.items())


def broker_resources(resources: Resources) -> Obj:
    """The container's resources: the spec's, with default requests where the spec sets neither a
    request nor a limit (Kubernetes makes a limit without a request the request)."""
    out: Obj = {k: dict(v) for k, v in resources.model_dump().items() if v}
    if not resources.requests:
        defaults = {k: v for k, v in DEFAULT_REQUESTS.items() if k not in resources.limits}
        if defaults:
            out["requests"] = defaults
    return out


def min_insync_default(config: dict[str, Any]) -> int:
    raw = config.get("min.insync.replicas", BROKER_PROPERTIES["min.insync.replicas"].default)
    try:
        return max(1, int(raw))
    except (TypeError, ValueError):
        return 1


def controller_url(settings: OperatorSettings, namespace: str, name: str, tls: bool = False) -> str:
    base = settings.controller_tls_url if tls else settings.controller_url
    return f"{base.rstrip('/')}/clusters/{namespace}/{name}"


def controller_tls_args(namespace: str, name: str) -> list[str]:
    """A secured cluster's brokers verify the controller API's certificate with their cluster CA, for the
    name the operator answers them with (controller_tls.py)."""
    return ["--override", f"listener.name.controller.ssl.truststore.location={listeners.CLUSTER_CA_PATH}/ca.crt",
            "--override", "listener.name.controller.ssl.truststore.type=PEM",
            "--override", f"controller.tls.server.name={controller_tls.server_name(namespace, name)}"]


def bootstrap_address(name: str, namespace: str, domain: str) -> str:
    return f"{naming.bootstrap_service(name)}.{namespace}.svc.{domain}:{naming.KAFKA_PORT}"


def _meta(name: str, namespace: str, cluster: str, owner: Obj, component: str = "broker") -> Obj:
    return {"name": name, "namespace": namespace, "labels": naming.labels(cluster, component),
            "ownerReferences": [owner]}


def config_map(name: str, namespace: str, owner: Obj, properties: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(naming.config_map(name), namespace, name, owner),
            "data": {"broker.properties": properties}}


def users_record(name: str, namespace: str, owner: Obj, text: str) -> Obj:
    """The record of the users the operator manages (user_record)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(naming.users_record(name), namespace, name, owner, "user-record"),
            "data": {"users.json": text}}


def token_secret(name: str, namespace: str, owner: Obj, token: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _meta(naming.token_secret(name), namespace, name, owner),
            "stringData": {"token": token}}


def service_account(name: str, namespace: str, owner: Obj) -> Obj:
    # Brokers never call the Kubernetes API: no token is mounted.
    return {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
            "metadata": _meta(naming.service_account(name), namespace, name, owner)}


def headless_service(name: str, namespace: str, owner: Obj, spec: DMClusterSpec | None = None) -> Obj:
    """Stable names for each broker (<pod>.<service>...): published before the pods are Ready,
    because brokers must reach each other (and be registered) to become Ready."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(naming.headless_service(name), namespace, name, owner),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": naming.selector_labels(name),
                     "ports": listeners.service_ports(spec or DMClusterSpec(), replication=True)}}


def bootstrap_service(name: str, namespace: str, owner: Obj, spec: DMClusterSpec | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(naming.bootstrap_service(name), namespace, name, owner),
            "spec": {"type": "ClusterIP", "selector": naming.selector_labels(name),
                     "ports": listeners.service_ports(spec or DMClusterSpec(), replication=False)}}


def pod_disruption_budget(name: str, namespace: str, owner: Obj, api_version: str) -> Obj:
    """One broker at a time may be disrupted voluntarily (drains)."""
    return {"apiVersion": api_version, "kind": "PodDisruptionBudget",
            "metadata": _meta(naming.pdb(name), namespace, name, owner),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": naming.selector_labels(name)}}}


def network_policy(name: str, namespace: str, owner: Obj, spec: DMClusterSpec) -> Obj:
    """The brokers' NetworkPolicy (issue 65: every pod of the Kubernetes cluster reached their HTTP port, whose
    /metrics names every topic and group): the Kafka listeners (the replication one included) and the REST
    listener open to the cluster's own brokers and to spec.networkPolicy.clientsFrom (anyone when absent); the
    HTTP port to metricsFrom; nothing else."""
    policy = spec.networkPolicy
    brokers = [{"podSelector": {"matchLabels": naming.selector_labels(name)}}]
    client_ports = [{"port": p["containerPort"], "protocol": "TCP"} for p in listeners.container_ports(spec)]
    ingress: list[Obj] = [{"ports": client_ports, **({"from": brokers + policy.clientsFrom}
                                                     if policy.clientsFrom is not None else {})}]
    http = [{"port": naming.HTTP_PORT, "protocol": "TCP"}]
    if policy.metricsFrom:
        ingress.append({"ports": http, "from": list(policy.metricsFrom)})
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta(naming.network_policy(name), namespace, name, owner),
            "spec": {"podSelector": {"matchLabels": naming.selector_labels(name)}, "policyTypes": ["Ingress"],
                     "ingress": ingress}}


def revision(spec: DMClusterSpec, properties: str, image: str) -> str:
    """What a broker's restart is for: a change of this hash rolls the brokers."""
    material = {"config": properties, "image": image, "pullPolicy": spec.imagePullPolicy,
                "resources": broker_resources(spec.resources), "template": spec.template.model_dump(),
                "rack": spec.rack.model_dump() if spec.rack else None}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def statefulset(name: str, namespace: str, owner: Obj, spec: DMClusterSpec, settings: OperatorSettings, *,
                replicas: int, properties: str) -> Obj:
    image = spec.image or settings.image
    rev = revision(spec, properties, image)
    domain = settings.cluster_domain
    selector = naming.selector_labels(name)
    advertised = listeners.advertised(spec, name, domain)
    # The default listener keeps dm's shorthand (so brokers of existing clusters are not restarted);
    # anything else is Kafka's listeners, from the ConfigMap, advertised by each pod's own name.
    listen = ["--port", str(naming.KAFKA_PORT),
              "--advertised-host", listeners.pod_host(name, domain)] \
        if advertised is None else ["--override", f"advertised.listeners={advertised}"]
    args = [
        "broker", "--config", f"{naming.CONFIG_PATH}/broker.properties",
        "--node-id-from-name", "$(POD_NAME)",
        "--data-dir", naming.DATA_PATH, "--host", "0.0.0.0", *listen,
        "--http-port", str(naming.HTTP_PORT),
        "--controller", controller_url(settings, namespace, name, tls=listeners.secured(spec)),
        *(controller_tls_args(namespace, name) if listeners.secured(spec) else []),
        # A force-deleted pod's replacement can start before the old process is gone: wait for it.
        "--override", "log.dirs.lock.wait.ms=30000",
    ]
    http_advertised = listeners.http_advertised(spec, name, domain)
    if http_advertised is not None:  # consumer instances' base_uri: this pod, by its own name
        args += ["--override", f"http.advertised.listeners={http_advertised}"]
    container: Obj = {
        "name": "broker", "image": image, "imagePullPolicy": spec.imagePullPolicy, "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "DM_CONTROLLER_TOKEN", "valueFrom": {"secretKeyRef": {"name": naming.token_secret(name),
                                                                           "key": "token"}}},
        ],
        "ports": [*listeners.container_ports(spec), {"name": "http", "containerPort": naming.HTTP_PORT}],
        # Ready once registered and serving; alive while the process answers (also during log recovery).
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 2,
                           "failureThreshold": 3, "timeoutSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 10,
                          "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 5},
        "resources": broker_resources(spec.resources),
        # A broker that refuses to start (its volume belongs to another cluster) says why in its last log
        # lines; the pod's status carries them to the operator's DMCluster conditions.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "data", "mountPath": naming.DATA_PATH},
                         {"name": "config", "mountPath": naming.CONFIG_PATH, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    zone_key = spec.rack.topologyKey if spec.rack else "topology.kubernetes.io/zone"
    pod_spec: Obj = {
        "serviceAccountName": naming.service_account(name),
        "automountServiceAccountToken": False,
        # Service link variables of a Service named dm-... would read as DM_* broker properties.
        "enableServiceLinks": False,
        # Longer than a controlled shutdown (bounded at 20 s), so SIGKILL never cuts one short.
        "terminationGracePeriodSeconds": settings.broker_grace_period_s,
        "securityContext": {"runAsUser": BROKER_UID, "runAsGroup": BROKER_UID, "fsGroup": BROKER_UID,
                            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": spec.template.affinity or {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                "labelSelector": {"matchLabels": selector}}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": zone_key, "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": selector}}],
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": naming.config_map(name)}},
                    {"name": "tmp", "emptyDir": {}}],
    }
    if listeners.needs_certificates(spec):
        # Secret volumes are updated in place (atomically) when the operator renews a certificate; the
        # brokers reload it from there without a restart.
        mounts = [("broker-certs", naming.broker_certs(name), listeners.CERTS_PATH),
                  ("cluster-ca", naming.cluster_ca_cert(name), listeners.CLUSTER_CA_PATH)]
        if listeners.uses_clients_ca(spec):
            mounts.append(("clients-ca", naming.clients_ca_cert(name), listeners.CLIENTS_CA_PATH))
        for volume, secret, path in mounts:
            pod_spec["volumes"].append({"name": volume, "secret": {"secretName": secret}})
            container["volumeMounts"].append({"name": volume, "mountPath": path, "readOnly": True})
    pull_secrets = [s.name for s in spec.imagePullSecrets] if spec.imagePullSecrets is not None \
        else settings.image_pull_secrets
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    if spec.template.tolerations:
        pod_spec["tolerations"] = spec.template.tolerations
    if spec.template.nodeSelector:
        pod_spec["nodeSelector"] = spec.template.nodeSelector
    if spec.template.priorityClassName:
        pod_spec["priorityClassName"] = spec.template.priorityClassName
    claim: Obj = {"metadata": {"name": "data", "labels": naming.labels(name)},
                  "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": spec.storage.size}}}}
    if spec.storage.storageClassName:
        claim["spec"]["storageClassName"] = spec.storage.storageClassName
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": _meta(naming.statefulset(name), namespace, name, owner),
        "spec": {
            "serviceName": naming.headless_service(name),
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},  # the operator restarts brokers one at a time, safely
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**spec.template.labels, **naming.labels(name)},
                             "annotations": {**SCRAPE_ANNOTATIONS, **spec.template.annotations,
                                             "dm.dev/revision": rev}},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [claim],
        },
    }
