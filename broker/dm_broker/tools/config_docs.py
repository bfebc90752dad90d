"""Renders docs/configuration.md from the property table in config.py.

    .venv/bin/python -m dm_broker.tools.config_docs > docs/configuration.md
"""

from __future__ import annotations

from ..config import BROKER_PROPERTIES, GROUP_PROPERTIES, GROUP_TO_BROKER, LONG_MAX, TOPIC_ONLY_PROPERTIES


def _default(value: object) -> str:
    if value is True or value is False:
        return "true" if value else "false"
    if value == LONG_MAX:
        return "Long.MAX (never)"
    return f"`{value}`" if value != "" else "(empty)"


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from `broker/dm_broker/config.py` by `python -m dm_broker.tools.config_docs`; a test keeps",
        "this page equal to the code.",
        "",
        "A broker reads, in increasing priority: the defaults below, a Kafka-style `.properties` file",
        "(`dm broker --config FILE`), environment variables (`DM_` + the name upper-cased with `.` → `_`,",
        "e.g. `DM_LOG_SEGMENT_BYTES`), then `--override name=value` and the dedicated flags (`--port` sets",
        "`listener.port`, `--data-dir` sets `log.dirs`, ...). Unknown names and invalid values stop the",
        "broker with a message naming the property.",
        "",
        "Kafka's coarser spellings `log.retention.hours`, `log.retention.minutes` and `log.roll.hours` are",
        "read into `log.retention.ms` / `log.roll.ms` (the finest one given wins, as in Kafka). A broker uses",
        "more than one core through more brokers per node, with GIL-free work in `num.io.threads` threads",
        "([ADR 0028](adr/0028-multi-core-nodes.md)). Kafka 4's KRaft `server.properties` starts a broker as it is",
        "([ADR 0031](adr/0031-kraft-server-properties.md)): `process.roles` must include `broker`, the listeners",
        "named in `controller.listener.names` are left unopened (dm's controller has its own API), and the lines",
        "that change nothing in dm (`controller.quorum.*`, `share.coordinator.*`, `num.network.threads`) are",
        "named in the broker's log at start-up (`accepted without effect: ...`).",
        "",
        "Properties with a topic-level name can be overridden per topic (`dm topics create --config",
        "retention.ms=3600000`, CreateTopics configs, or IncrementalAlterConfigs at run time).",
        "",
        "As in Kafka, the `ssl.*`, `sasl.enabled.mechanisms`, `sasl.jaas.config`, `sasl.server.max.receive.size`",
        "and `connections.max.reauth.ms` properties can be set for one listener with",
        "`listener.name.<listener>.<property>`, and a mechanism's JAAS configuration with",
        "`listener.name.<listener>.<mechanism>.sasl.jaas.config`; `listener.name.controller.ssl.*` secures the",
        "link between brokers and the controller ([security](security.md)). Passwords and keys are never",
        "returned by DescribeConfigs.",
        "",
        "The REST Proxy (`http.listeners`, `http.*`, `consumer.*`) is configured the same way: an HTTPS",
        "listener reads `listener.name.https.ssl.*`, HTTP Basic checks `listener.name.http.plain.sasl.jaas.config`",
        "(or `...https...`) and the cluster's SCRAM credentials ([HTTP](http.md)).",
        "",
        "No Kafka property covers the C library's heap: a broker and the controller fix glibc's",
        "`M_MMAP_THRESHOLD` (16 MiB) and `M_TRIM_THRESHOLD` (64 MiB) at start-up, so request buffers freed",
        "together stay in the heap instead of being faulted in again",
        "([ADR 0049](adr/0049-the-heap-keeps-request-sized-buffers.md)).",
        "Setting `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or either in `GLIBC_TUNABLES` leaves",
        "malloc to that choice; the broker's log says which applies (`malloc: ...`).",
        "",
        "| broker property | topic override | default | meaning |",
        "|---|---|---|---|",
    ]
    for prop in BROKER_PROPERTIES.values():
        choices = f" One of: {', '.join(prop.choices)}." if prop.choices else ""
        dynamic = " **Dynamic.**" if prop.dynamic else ""
        lines.append(f"| `{prop.name}` | {f'`{prop.topic_name}`' if prop.topic_name else ''} | "
                     f"{_default(prop.default)} | {prop.doc}{choices}{dynamic} |")
    applied = [p for p in TOPIC_ONLY_PROPERTIES if p.applied]
    ignored = [p for p in TOPIC_ONLY_PROPERTIES if not p.applied]
    lines += ["", "## Topic configs without a broker property", "", "| topic config | default | meaning |",
              "|---|---|---|"]
    lines += [f"| `{p.name}` | {_default(p.default)} | {p.doc} |" for p in applied]
    lines += ["", "### Kafka topic configs dm does not implement", "",
              "Taken in CreateTopics and AlterConfigs only with a value that changes nothing in dm (Kafka's",
              "default, or any value where dm's behaviour is the same either way); any other value is refused",
              "with INVALID_CONFIG naming the config, never stored and ignored.", "",
              "| topic config | default | accepted | why |", "|---|---|---|---|"]
    lines += [f"| `{p.name}` | {_default(p.default)} | {', '.join(f'`{v}`' for v in p.only) if p.only else 'any'} | "
              f"{p.doc} |" for p in ignored]
    lines += ["", "## Group configs", "",
              "Set per group with IncrementalAlterConfigs on a GROUP resource (`kafka-configs --entity-type groups",
              "--entity-name G --alter --add-config ...`); a value must lie within the broker's min/max bounds.", "",
              "| group config | default | meaning |", "|---|---|---|"]
    for prop in GROUP_PROPERTIES.values():
        default = f"`{GROUP_TO_BROKER[prop.name]}`" if prop.name in GROUP_TO_BROKER else _default(prop.default)
        choices = f" One of: {', '.join(prop.choices)}." if prop.choices else ""
        lines.append(f"| `{prop.name}` | {default} | {prop.doc}{choices} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
