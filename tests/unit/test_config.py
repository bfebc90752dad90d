"""The property table's promises: secrets are marked as Kafka's PASSWORD type; the controller refuses to
listen off loopback without a token."""

from __future__ import annotations

import re

SECRET_LOOKING = re.compile(r"password|secret|token|jaas|\.key$|\.key\.|certificate|credential|private")


def test_every_secret_looking_property_is_sensitive():
    """Kafka's PASSWORD type: DescribeConfigs returns null with is_sensitive, and dm never logs it. A new
    property whose name looks like a secret fails here until it is marked (or named otherwise)."""
    from dm_broker.config import BROKER_PROPERTIES, TOPIC_ONLY_PROPERTIES, _listener_scoped

    unmarked = [p.name for p in [*BROKER_PROPERTIES.values(), *TOPIC_ONLY_PROPERTIES]
                if SECRET_LOOKING.search(p.name) and not p.secret]
    assert unmarked == []
    for scoped in ("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", "listener.name.ssl.ssl.keystore.password",
                   "listener.name.controller.ssl.keystore.key"):
        assert _listener_scoped(scoped).secret, scoped


def test_a_controller_off_loopback_needs_a_token():
    from dm_broker.app import open_controller_refusal

    assert open_controller_refusal("127.0.0.1", "") is None
    assert open_controller_refusal("::1", "") is None
    assert open_controller_refusal("localhost", "") is None
    assert "without a token" in open_controller_refusal("0.0.0.0", "")
    assert "without a token" in open_controller_refusal("10.1.2.3", "")
    assert open_controller_refusal("0.0.0.0", "t0ken") is None
