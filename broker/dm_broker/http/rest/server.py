"""The REST Proxy's listeners (http.listeners): one aiohttp site per HTTP/HTTPS listener, sharing this
broker's producer, consumer instances and Kafka call path."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from ...config import BrokerConfig, ConfigError
from ...connection_quotas import ConnectionQuotas
from ...security.listeners import Listener, parse_endpoints
from ...security.tls import ReloadingContext, TlsSettings
from ..budgeted_site import BudgetedSite
from .auth import HttpAuthenticator
from .consumers import ConsumerRegistry
from .kafka_calls import KafkaCalls
from .producer import RestProducer
from .routes import RestApi

if TYPE_CHECKING:
    from ...broker import Broker

log = logging.getLogger(__name__)
SCHEMES = {"HTTP": "PLAINTEXT", "HTTPS": "SSL"}


def http_listeners(config: BrokerConfig) -> list[Listener]:
    """The listeners http.listeners names, with their advertised hosts; ConfigError for what cannot be served."""
    endpoints = parse_endpoints(config["http.listeners"], "http.listeners")
    advertised = {name: (host, port) for name, host, port in
                  parse_endpoints(config["http.advertised.listeners"], "http.advertised.listeners")}
    listeners = []
    for name, host, port in endpoints:
        if name not in SCHEMES:
            raise ConfigError(f"http.listeners: {name}://{host}:{port} must be HTTP:// or HTTPS://")
        adv_host, adv_port = advertised.get(name, ("", 0))
        listeners.append(Listener(name=name, host=host, port=port, security_protocol=SCHEMES[name],
                                  advertised_host=adv_host or host or config["advertised.host"]
                                  or config["listener.host"], advertised_port=adv_port))
    unknown = set(advertised) - {listener.name for listener in listeners}
    if unknown:
        raise ConfigError(f"http.advertised.listeners names {', '.join(sorted(unknown))}, which http.listeners "
                          "does not have")
    return listeners


class RestProxy:
    """Started once the broker serves (its listeners are bound and it knows the cluster)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.listeners = http_listeners(broker.config)
        self.tls = {listener.name: ReloadingContext(TlsSettings.for_listener(broker.config, listener.name))
                    for listener in self.listeners if listener.tls}
        self.calls = KafkaCalls(broker)
        self.producer = RestProducer(broker, self.calls)
        self.consumers = ConsumerRegistry(broker)
        broker.metrics.rest_consumers.set_function(lambda: len(self.consumers.instances))  # read at scrapes
        self.sites: list[BudgetedSite] = []
        self.quotas: ConnectionQuotas | None = None  # the broker's: HTTP connections share its descriptor budget
        self.bound: dict[str, str] = {}  # listener name -> its base URI
        self._tls_tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.consumers.start()
        for listener in self.listeners:
            scheme = listener.name.lower()
            base = f"{scheme}://{listener.advertised_host}:{{port}}"
            api = RestApi(self.broker, self.producer, self.consumers, HttpAuthenticator(self.broker, listener), base)
            runner = web.AppRunner(api.app(), access_log=None, shutdown_timeout=2)
            await runner.setup()
            tls = self.tls.get(listener.name)
            context = tls.context if tls is not None else None
            site = BudgetedSite(runner, listener.host or None, listener.port, self.quotas,
                                self.broker.metrics.connections_refused.labels(listener.name).inc, ssl_context=context,
                                name=listener.name,
                                header_timeout_s=self.broker.config["http.request.timeout.ms"] / 1000)
            try:
                await site.start()
            except OSError as exc:
                await site.cleanup()
                raise ConfigError(f"http.listeners: {listener.name} cannot bind {listener.host or '*'}:"
                                  f"{listener.port}: {exc.strerror}") from None
            port = site.port
            api.base_uri = base.format(port=listener.advertised_port or port)
            self.bound[listener.name] = api.base_uri
            self.sites.append(site)
            log.info("REST Proxy on %s (%s)", api.base_uri, self.broker.config["http.authentication.method"])
        # renewed certificates reach new connections (the contexts are updated in place)
        self._tls_tasks = [asyncio.get_running_loop().create_task(tls.keep_current()) for tls in self.tls.values()]

    async def close(self) -> None:
        for task in self._tls_tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.consumers.close()
        for site in self.sites:
            with contextlib.suppress(Exception):
                await site.cleanup()
        await self.calls.close()
