"""A broker's security, assembled once from its configuration: listeners, their TLS contexts and SASL
settings, the principal mapper, the authorizer (rebuilt from the ACLs in each metadata snapshot),
and how this broker connects to the others."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import BrokerConfig, ConfigError
from ..controller.models import TlsReport
from .acls import AclBinding, Authorizer, Operation, ResourceType
from .client_security import ClientSecurity
from .jaas import parse_jaas
from .listeners import Listener, ListenerSetup, enabled_mechanisms, listener_setup
from .login_guard import LoginGuard
from .principal import Principal, PrincipalMapper
from .sasl import Authenticator, CredentialLookup, SaslSettings
from .session import Session
from .tls import ReloadingContext, TlsSettings, client_context

log = logging.getLogger(__name__)
AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer",
               "kafka.security.auth.SimpleAclAuthorizer", "dm.StandardAuthorizer")


class SecuritySetup:
    def __init__(self, config: BrokerConfig, credentials: CredentialLookup | None = None) -> None:
        self.config = config
        self.listeners: ListenerSetup = listener_setup(config)
        self.mapper = PrincipalMapper(config["ssl.principal.mapping.rules"])
        self.credentials: CredentialLookup = credentials or (lambda _user, _mechanism: None)
        self.tls: dict[str, ReloadingContext] = {}
        for listener in self.listeners.listeners:
            if listener.tls:
                self.tls[listener.name] = ReloadingContext(TlsSettings.for_listener(config, listener.name))
            if listener.sasl:
                for mechanism in enabled_mechanisms(config, listener.name):
                    parse_jaas(config.jaas_config(listener.name, mechanism),
                               f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config")
        authorizer = config["authorizer.class.name"].strip()
        if authorizer and authorizer not in AUTHORIZERS:
            raise ConfigError(f"authorizer.class.name: {authorizer} is not an authorizer dm has (use "
                              f"{AUTHORIZERS[0]}: dm's implementation of Kafka's ACLs)")
        self.authorization = bool(authorizer)
        self.super_users = self._super_users(config["super.users"])
        self.authorizer = Authorizer([], self.super_users, config["allow.everyone.if.no.acl.found"])
        self.client = self._client_security()
        self.login_guard = LoginGuard()

    @staticmethod
    def _super_users(text: str) -> list[str]:
        users = [u.strip() for u in text.split(";") if u.strip()]
        for u in users:
            try:
                Principal.parse(u)
            except ValueError as exc:
                raise ConfigError(f"super.users: {exc}") from None
        return users

    # -- per connection ---------------------------------------------------------------------------

    def session(self, listener: Listener, host: str) -> Session:
        session = Session(listener, host)
        if listener.sasl:
            session.authenticated = False
            session.reauth_ms = self.config.for_listener(listener.name, "connections.max.reauth.ms")
            session.authenticator = Authenticator(self._sasl_settings(listener), host, self.login_guard)
        return session

    def _sasl_settings(self, listener: Listener) -> SaslSettings:
        mechanisms = enabled_mechanisms(self.config, listener.name)
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            users = parse_jaas(self.config.jaas_config(listener.name, "PLAIN")).users
        return SaslSettings(mechanisms, users, self.credentials,
                            self.config.for_listener(listener.name, "sasl.server.max.receive.size"))

    def principal_from_certificate(self, subject: str) -> Principal:
        from .principal import user

        return user(self.mapper.name(subject))

    def tls_report(self) -> dict[str, TlsReport]:
        """What each TLS listener has loaded, for the heartbeat (the operator rotates by it)."""
        return {name: TlsReport(certificate=tls.certificate, trusted=tls.trusted,
                                retained=tls.retains_removed_cas) for name, tls in self.tls.items()}

    # -- authorization ----------------------------------------------------------------------------

    def set_acls(self, acls: list[AclBinding]) -> None:
        if acls != self.authorizer.acls:
            self.authorizer = Authorizer(acls, self.super_users, self.config["allow.everyone.if.no.acl.found"])

    def allowed(self, session: Session, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if not self.authorization:
            return True
        return self.authorizer.authorize(session.principal, session.host, operation, resource_type, name)

    def allowed_any(self, session: Session, operation: Operation, resource_type: ResourceType) -> bool:
        if not self.authorization:
            return True
        return self.authorizer.authorize_any(session.principal, session.host, operation, resource_type)

    # -- as a client of the other brokers ---------------------------------------------------------------

    def _client_security(self) -> ClientSecurity:
        listener = self.listeners.inter_broker_listener
        context = client_context(TlsSettings.for_listener(self.config, listener.name)) if listener.tls else None
        if not listener.sasl:
            return ClientSecurity(listener.security_protocol, context)
        mechanism = self.config["sasl.mechanism.inter.broker.protocol"].strip().upper()
        if mechanism not in enabled_mechanisms(self.config, listener.name):
            raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on the inter-broker "
                              f"listener {listener.name}")
        jaas = parse_jaas(self.config.jaas_config(listener.name, mechanism))
        creds = jaas.client_credentials
        if creds is None:
            raise ConfigError(f"listener {listener.name}: the {mechanism} sasl.jaas.config needs username and password "
                              "for this broker to authenticate to the others (inter-broker listener)")
        return ClientSecurity(listener.security_protocol, context, mechanism, *creds)


def endpoint_of(listener: Listener, bound_port: int) -> tuple[str, int]:
    return listener.advertised_host, listener.advertised_port or bound_port


SessionFactory = Callable[[Listener, str], Session]
