"""A DMCluster's listeners and authorization as broker properties, ports and mounts (pure).

The default — one plaintext listener on 9092, no authorization — stays dm's shorthand (--port), so an
existing cluster's brokers are not restarted when the operator learns listeners. Anything else is
Kafka's `listeners` set: each spec listener becomes `<NAME>://0.0.0.0:<port>`, and the brokers
replicate over REPLICATION on 9091, TLS both ways with the brokers' certificate (the cluster CA
signs it; its subject is the brokers' principal, a super user).
"""

from __future__ import annotations

from pydantic import BaseModel

from . import naming
from .models import DEFAULT_LISTENERS, DMClusterSpec, HttpSpec, ListenerSpec

REPLICATION = "REPLICATION"
REPLICATION_PORT = 9091
CERTS_PATH = "/etc/dm/certs"  # the brokers' key and certificate chain: broker.pem
CLUSTER_CA_PATH = "/etc/dm/cluster-ca"  # ca.crt: the CA bundle that signs the brokers' certificates
CLIENTS_CA_PATH = "/etc/dm/clients-ca"  # ca.crt: the CA bundle that signs the Users' certificates
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Endpoint(BaseModel):
    name: str  # the broker's listener name (upper case)
    port: int
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    spec: ListenerSpec | None = None  # None for the replication listener


def is_default(spec: DMClusterSpec) -> bool:
    return [li.model_dump() for li in spec.listeners] == [ListenerSpec(**x).model_dump() for x in DEFAULT_LISTENERS] \
        and spec.authorization is None


def secured(spec: DMClusterSpec) -> bool:
    """Whether the Kafka side is secured: a TLS listener, authentication, or authorization (brokers then
    replicate and reach the controller over TLS)."""
    return spec.authorization is not None or any(li.tls or li.authentication != "none" for li in spec.listeners)


def needs_certificates(spec: DMClusterSpec) -> bool:
    """Whether brokers need the CAs and their certificate: a secured Kafka side, or HTTPS on the REST Proxy."""
    http = served_http(spec)
    return secured(spec) or (http is not None and http.tls)


def served_http(spec: DMClusterSpec) -> HttpSpec | None:
    """The REST Proxy's settings when spec.http turns it on."""
    return spec.http if spec.http is not None and spec.http.enabled else None


def pod_host(cluster: str, domain: str) -> str:
    """A broker pod's own DNS name ($(POD_NAME), $(POD_NAMESPACE) expanded by Kubernetes)."""
    return f"$(POD_NAME).{naming.headless_service(cluster)}.$(POD_NAMESPACE).svc.{domain}"


def http_scheme(spec: DMClusterSpec) -> str:
    return "HTTPS" if spec.http is not None and spec.http.tls else "HTTP"


def http_properties(spec: DMClusterSpec) -> dict[str, str]:
    """The REST Proxy's broker properties (docs/http.md): its listener, TLS with the broker certificate,
    client certificates of the clients CA, or HTTP Basic against the Users' SCRAM credentials."""
    http = served_http(spec)
    if http is None:
        return {}
    scheme = http_scheme(spec)
    props = {"http.listeners": f"{scheme}://0.0.0.0:{http.port}"}
    scope = f"listener.name.{scheme.lower()}"
    if http.tls:
        props[f"{scope}.ssl.keystore.location"] = f"{CERTS_PATH}/broker.pem"
    if http.authentication == "tls":
        props[f"{scope}.ssl.client.auth"] = "required"
        props[f"{scope}.ssl.truststore.location"] = f"{CLIENTS_CA_PATH}/ca.crt"
    if http.authentication == "basic":
        props["http.authentication.method"] = "BASIC"
    return props


def http_advertised(spec: DMClusterSpec, cluster: str, domain: str) -> str | None:
    """http.advertised.listeners for a broker pod: a consumer instance's base_uri names its own broker."""
    http = served_http(spec)
    return None if http is None else f"{http_scheme(spec)}://{pod_host(cluster, domain)}:{http.port}"


def uses_clients_ca(spec: DMClusterSpec) -> bool:
    http = served_http(spec)
    return any(li.authentication == "tls" for li in spec.listeners) or (http is not None and
                                                                         http.authentication == "tls")


def protocol(li: ListenerSpec) -> str:
    if li.authentication == "scram-sha-512":
        return "SASL_SSL" if li.tls else "SASL_PLAINTEXT"
    return "SSL" if li.tls else "PLAINTEXT"


def endpoints(spec: DMClusterSpec) -> list[Endpoint]:
    out = [Endpoint(name=li.name.upper(), port=li.port, protocol=protocol(li), spec=li) for li in spec.listeners]
    if secured(spec):
        out.insert(0, Endpoint(name=REPLICATION, port=REPLICATION_PORT, protocol="SSL"))
    return out


def broker_subject(cluster: str) -> str:
    """The brokers' certificate subject, RFC 2253 order; their principal is User:<this>."""
    return f"CN={cluster}-broker,O=dm.dev"


def properties(spec: DMClusterSpec, cluster: str) -> dict[str, str]:
    """The broker properties the listeners, authorization and the REST Proxy make (none for the default)."""
    if is_default(spec):
        return http_properties(spec)
    eps = endpoints(spec)
    props = {
        "listeners": ",".join(f"{e.name}://0.0.0.0:{e.port}" for e in eps),
        "listener.security.protocol.map": ",".join(f"{e.name}:{e.protocol}" for e in eps),
        "inter.broker.listener.name": REPLICATION if secured(spec) else eps[0].name,
    }
    if secured(spec):
        props["ssl.keystore.location"] = f"{CERTS_PATH}/broker.pem"
        props["ssl.truststore.location"] = f"{CLUSTER_CA_PATH}/ca.crt"
        props[f"listener.name.{REPLICATION.lower()}.ssl.client.auth"] = "required"
    for e in eps:
        if e.spec is None:
            continue
        scope = f"listener.name.{e.name.lower()}"
        if e.spec.authentication == "scram-sha-512":
            props[f"{scope}.sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        if e.spec.authentication == "tls":
            props[f"{scope}.ssl.client.auth"] = "required"
            props[f"{scope}.ssl.truststore.location"] = f"{CLIENTS_CA_PATH}/ca.crt"
    if spec.authorization is not None:
        props["authorizer.class.name"] = AUTHORIZER
        props["super.users"] = ";".join([f"User:{broker_subject(cluster)}", *spec.authorization.superUsers])
    props.update(http_properties(spec))
    return props


def advertised(spec: DMClusterSpec, cluster: str, domain: str) -> str | None:
    """advertised.listeners for a broker pod ($(POD_NAME), $(POD_NAMESPACE) expanded by Kubernetes)."""
    if is_default(spec):
        return None
    host = pod_host(cluster, domain)
    return ",".join(f"{e.name}://{host}:{e.port}" for e in endpoints(spec))


def _http_ports(spec: DMClusterSpec) -> list[int]:
    http = served_http(spec)
    return [http.port] if http is not None else []


def service_ports(spec: DMClusterSpec, replication: bool) -> list[dict]:
    rest = [{"name": "rest", "port": port, "targetPort": port} for port in _http_ports(spec)]
    if is_default(spec):
        return [{"name": "kafka", "port": naming.KAFKA_PORT, "targetPort": "kafka"}, *rest]
    return [*({"name": e.name.lower(), "port": e.port, "targetPort": e.port} for e in endpoints(spec)
              if replication or e.spec is not None), *rest]


def container_ports(spec: DMClusterSpec) -> list[dict]:
    rest = [{"name": "rest", "containerPort": port} for port in _http_ports(spec)]
    if is_default(spec):
        return [{"name": "kafka", "containerPort": naming.KAFKA_PORT}, *rest]
    return [*({"name": e.name.lower()[:15], "containerPort": e.port} for e in endpoints(spec)), *rest]


def statuses(spec: DMClusterSpec, cluster: str, namespace: str, domain: str) -> list[dict]:
    service = f"{naming.bootstrap_service(cluster)}.{namespace}.svc.{domain}"
    return [{"name": li.name, "bootstrapServers": f"{service}:{li.port}", "tls": li.tls,
             "authentication": li.authentication} for li in spec.listeners]


def http_status(spec: DMClusterSpec, cluster: str, namespace: str, domain: str) -> dict | None:
    http = served_http(spec)
    if http is None:
        return None
    service = f"{naming.bootstrap_service(cluster)}.{namespace}.svc.{domain}"
    return {"url": f"{http_scheme(spec).lower()}://{service}:{http.port}", "tls": http.tls,
            "authentication": http.authentication}
