"""The `dm` command."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

if __name__ == "__main__":  # `python -m dm_broker.cli`, as `dm up` and the tests start brokers and controllers
    # kio registers a Hypothesis strategy for each of its types at import whenever Hypothesis can be
    # imported: 0.25 s of CPU at every start where it is installed (as in the test environment, which
    # starts hundreds of brokers), for strategies a dm process never uses. Importing it now fails.
    sys.modules.setdefault("hypothesis", None)

from .config import BrokerConfig, ConfigError
from .tools import cluster, consume, groups, produce, quotas, reassign, strays, topics
from .tools.client import DEFAULT_BOOTSTRAP, load_command_config


def _broker(args: argparse.Namespace) -> None:
    from .app import run

    overrides: dict[str, str] = {}
    for item in args.override or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"dm: --override expects key=value, got {item!r}")
        overrides[key] = value
    if args.node_id_from_name:
        number = args.node_id_from_name.rpartition("-")[2]
        if not number.isdigit():
            raise SystemExit(f"dm: --node-id-from-name {args.node_id_from_name!r} does not end in -<number>")
        overrides["node.id"] = number
    for flag, prop in (("data_dir", "log.dirs"), ("host", "listener.host"), ("port", "listener.port"),
                       ("http_port", "http.port"), ("node_id", "node.id"), ("advertised_host", "advertised.host"),
                       ("controller", "controller.url")):
        value = getattr(args, flag)
        if value is not None:
            overrides[prop] = value
    try:
        config = BrokerConfig.build(overrides, Path(args.config) if args.config else None)
    except ConfigError as exc:
        raise SystemExit(f"dm: invalid configuration: {exc}") from None
    run(config, banner=args.banner)


def _controller(args: argparse.Namespace) -> None:
    import os

    from .app import run_controller

    overrides = {"log.dirs": args.data_dir, "listener.host": args.host}
    for item in args.override or []:
        key, _, value = item.partition("=")
        overrides[key] = value
    try:
        config = BrokerConfig.build(overrides, Path(args.config) if args.config else None)
    except ConfigError as exc:
        raise SystemExit(f"dm: invalid configuration: {exc}") from None
    token = args.token or config["controller.token"] or os.environ.get("DM_CONTROLLER_TOKEN", "")
    run_controller(config, args.port, token)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dm")
    except PackageNotFoundError:
        return "unknown (not installed)"


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help line, with its default when it has a meaningful one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" not in text and "default" not in text and default not in (None, False, argparse.SUPPRESS)
                and (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))):
            text += " (default: %(default)s)"
        return text


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and all its sub-command parsers."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += parsers(child)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dm", description="dm: a Kafka-compatible streaming platform")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument("--version", action="version", version=f"dm {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run a broker")
    b.add_argument("--data-dir", help="log directory (log.dirs; default ./data)")
    b.add_argument("--host", help="address the Kafka listener binds to (listener.host; default 127.0.0.1)")
    b.add_argument("--port", type=int, help="Kafka port (listener.port; default 9092)")
    b.add_argument("--http-port", type=int, help="port of /healthz, /readyz, /metrics (http.port; -1: off)")
    b.add_argument("--node-id", type=int, help="this broker's id (node.id; default 0)")
    b.add_argument("--node-id-from-name", metavar="NAME",
                   help="take the node id from NAME's trailing -<number> (a StatefulSet pod's name: $(POD_NAME))")
    b.add_argument("--advertised-host", help="host clients are told to connect to (default: --host)")
    b.add_argument("--config", help="Kafka-style .properties file")
    b.add_argument("--override", action="append", metavar="KEY=VALUE", help="broker property (repeatable)")
    b.add_argument("--banner", action="store_true", help="print how to use the broker once it is ready")
    b.add_argument("--controller", help="controller URL (default: run a controller in-process)")
    b.set_defaults(func=_broker)

    c = sub.add_parser("controller", help="run the cluster controller")
    c.add_argument("--data-dir", default="./data/controller", help="where the controller keeps its state")
    c.add_argument("--host", default="127.0.0.1", help="address the controller's HTTP API binds to")
    c.add_argument("--port", type=int, default=9990, help="port of the controller's HTTP API")
    c.add_argument("--token", help="shared secret brokers must present (or DM_CONTROLLER_TOKEN)")
    c.add_argument("--config", help="Kafka-style .properties file (listener.name.controller.ssl.* for https)")
    c.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="property such as broker.session.timeout.ms (repeatable)")
    c.set_defaults(func=_controller)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="host:port (env DM_BOOTSTRAP)")
    common.add_argument("--command-config", metavar="FILE",
                        help="client properties (librdkafka names: security.protocol, ssl.ca.location, "
                             "sasl.mechanism, sasl.username, sasl.password, ...) for a secured cluster "
                             "(env DM_COMMAND_CONFIG)")
    topics.register(sub, common)
    produce.register(sub, common)
    consume.register(sub, common)
    groups.register(sub, common)
    quotas.register(sub, common)
    cluster.register(sub)
    reassign.register_cluster(sub, common)
    strays.register(sub)
    from .tools import bench

    bench.register(sub, common)
    for p in parsers(parser):
        p.formatter_class = HelpFormatter
    return parser


def main(argv: list[str] | None = None) -> None:
    # A shell starts a background job with SIGINT ignored, and a process inherits that: `dm consume`
    # started from a script run with `&` would then ignore Ctrl-C for good. dm always answers it.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        if hasattr(args, "command_config"):
            load_command_config(args.command_config)
        args.func(args)
    except KeyboardInterrupt:
        # Ctrl-C is how a user stops `dm consume` and friends: a clean exit, not a traceback.
        print("dm: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
