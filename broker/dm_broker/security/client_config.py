"""A client's security settings, whichever spelling the user writes them in (pure, but for reading
the files it names).

Two spellings are in use: the Java client's (what Spark's Kafka source, Kafka's tools'
`--command-config` and every `client.properties` say: `sasl.jaas.config`, `ssl.truststore.*`,
`ssl.keystore.*`) and librdkafka's (what confluent-kafka says: `sasl.username`, `ssl.ca.location`,
`ssl.certificate.location`). `to_librdkafka` turns the first into the second, so one dict configures
confluent-kafka's clients; `wire_security` turns that dict into the TLS context and SASL credentials
dm's own protocol client connects with.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..config_error import ConfigError
from .client_security import ClientSecurity
from .jaas import parse_jaas
from .sasl_client import CLIENT_MECHANISMS
from .tls import TlsSettings, client_context, read_pkcs12

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM": "org.apache.kafka.common.security.scram.ScramLoginModule"}
# Java-only names: consumed by the translation, never handed to librdkafka (which refuses them).
_JAVA_ONLY = ("sasl.jaas.config", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
              "ssl.truststore.certificates", "ssl.keystore.type", "ssl.keystore.certificate.chain",
              "ssl.keystore.key", "ssl.enabled.protocols", "ssl.protocol")


def _pkcs12_certificates(path: str, password: str, prop: str) -> str:
    """The certificates of a PKCS12 store, as PEM."""
    try:
        _, cert, extra = read_pkcs12(path, password)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{prop}: cannot read the PKCS12 store {path}: {exc}") from None
    return (cert + b"".join(extra)).decode()


def to_librdkafka(props: Mapping[str, str]) -> dict[str, str]:
    """The same settings in librdkafka's names. Names both share pass through; librdkafka's own
    spelling wins where both are given. ConfigError names the property it cannot use."""
    _refuse_unused_tls(props)  # named as the user wrote it
    out = {k: str(v) for k, v in props.items() if k not in _JAVA_ONLY}
    jaas_text = props.get("sasl.jaas.config", "")
    if jaas_text:
        jaas = parse_jaas(jaas_text)
        if jaas.module not in LOGIN_MODULES.values():
            raise ConfigError(f"sasl.jaas.config: {jaas.module} is not supported; use "
                              f"{' or '.join(LOGIN_MODULES.values())} with username and password")
        if jaas.client_credentials is None:
            raise ConfigError("sasl.jaas.config: needs username=\"...\" and password=\"...\"")
        out.setdefault("sasl.username", jaas.client_credentials[0])
        out.setdefault("sasl.password", jaas.client_credentials[1])
    for prop in ("ssl.truststore.type", "ssl.keystore.type"):
        if props.get(prop, "PEM").upper() not in ("PEM", "PKCS12"):
            raise ConfigError(f"{prop}: {props[prop]} is not supported; use PEM or PKCS12 (convert a JKS store with "
                              "keytool -importkeystore -deststoretype PKCS12)")
    if "ssl.truststore.certificates" in props:
        out.setdefault("ssl.ca.pem", props["ssl.truststore.certificates"])
    if props.get("ssl.truststore.location"):
        if props.get("ssl.truststore.type", "PEM").upper() == "PKCS12":
            out.setdefault("ssl.ca.pem", _pkcs12_certificates(props["ssl.truststore.location"],
                                                              props.get("ssl.truststore.password", ""),
                                                              "ssl.truststore.location"))
        else:
            out.setdefault("ssl.ca.location", props["ssl.truststore.location"])
    if props.get("ssl.keystore.type", "PEM").upper() == "PEM":
        out.pop("ssl.keystore.location", None)  # librdkafka's ssl.keystore.* is PKCS12 only
        out.pop("ssl.keystore.password", None)
        if props.get("ssl.keystore.certificate.chain"):
            out.setdefault("ssl.certificate.pem", props["ssl.keystore.certificate.chain"])
        elif props.get("ssl.keystore.location"):
            out.setdefault("ssl.certificate.location", props["ssl.keystore.location"])
            if not props.get("ssl.keystore.key"):  # Kafka's PEM keystore file holds the key too
                out.setdefault("ssl.key.location", props["ssl.keystore.location"])
        if props.get("ssl.keystore.key"):
            out.setdefault("ssl.key.pem", props["ssl.keystore.key"])
    if props.get("ssl.endpoint.identification.algorithm", None) == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # Java's empty value turns the check off
    return out


def security_only(config: Mapping[str, str]) -> dict[str, str]:
    """The connection settings of a (librdkafka-style) client configuration, for an admin client."""
    return {k: v for k, v in config.items() if k.startswith(("security.", "sasl.", "ssl."))}


def check(config: Mapping[str, str]) -> None:
    """ConfigError for librdkafka-style settings dm's clients cannot connect with."""
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"security.protocol: {config['security.protocol']!r} is not one of {', '.join(PROTOCOLS)}")
    if protocol.startswith("SASL_"):
        mechanism = _mechanism(config)
        if mechanism not in CLIENT_MECHANISMS:
            raise ConfigError(f"sasl.mechanism: {mechanism} is not supported; use {', '.join(CLIENT_MECHANISMS)}")
        if not config.get("sasl.username") or "sasl.password" not in config:
            raise ConfigError(f"security.protocol={protocol} needs credentials: sasl.jaas.config (or sasl.username "
                              "and sasl.password)")
    _refuse_unused_tls(config)


def _refuse_unused_tls(props: Mapping[str, str]) -> None:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    tls_given = sorted(k for k in props if k.startswith("ssl.") and k != "ssl.endpoint.identification.algorithm")
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and tls_given:
        raise ConfigError(f"{tls_given[0]} is set but security.protocol is {protocol}: the connection would not use "
                          "TLS (set security.protocol to SSL or SASL_SSL)")


def _mechanism(config: Mapping[str, str]) -> str:
    # Kafka's default mechanism is GSSAPI; dm's clients refuse it by name rather than guessing.
    return (config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI").upper()


def wire_security(config: Mapping[str, str]) -> ClientSecurity | None:
    """How dm's protocol client connects with these (librdkafka-style) settings; None for plaintext."""
    check(config)
    protocol = config.get("security.protocol", "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        key = config.get("ssl.key.pem", "")
        if not key and config.get("ssl.key.location"):
            key = _read(config["ssl.key.location"], "ssl.key.location")
        context = client_context(TlsSettings(
            "client TLS", keystore_type="PKCS12" if config.get("ssl.keystore.location") else "PEM",
            keystore_location=config.get("ssl.keystore.location") or config.get("ssl.certificate.location", ""),
            keystore_password=config.get("ssl.keystore.password", ""), key_password=config.get("ssl.key.password", ""),
            certificate_chain=config.get("ssl.certificate.pem", ""), key=key,
            truststore_location=config.get("ssl.ca.location", ""), truststore_certificates=config.get("ssl.ca.pem", ""),
            endpoint_identification="" if config.get("ssl.endpoint.identification.algorithm") == "none" else "https"))
    mechanism = _mechanism(config) if protocol.startswith("SASL_") else ""
    return ClientSecurity(protocol, context, mechanism, config.get("sasl.username", ""),
                          config.get("sasl.password", ""))


def _read(path: str, prop: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{prop}: cannot read {path}: {exc.strerror}") from None
