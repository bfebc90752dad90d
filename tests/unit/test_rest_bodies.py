"""The REST Proxy's produce bodies: the msgspec reader of binary bodies reads every body exactly as the
pydantic models do, or leaves it to them (their verdict and messages stand)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from dm_broker.http.rest.bodies import BinaryProduceBody, parse_json, parse_produce
from dm_broker.http.rest.errors import RestError
from hypothesis import given, settings
from hypothesis import strategies as st


def _fields(record: Any) -> tuple:
    return (record.key, record.value, record.partition, record.timestamp,
            tuple((h.key, h.value) for h in record.headers))


def _verdict(parse: Any, raw: bytes) -> Any:
    try:
        return [_fields(r) for r in parse(raw)]
    except RestError as exc:
        return (exc.status, exc.error_code, exc.message)


def _models(raw: bytes) -> Any:
    return parse_json(BinaryProduceBody, raw).records


B64 = st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
ODD_B64 = st.sampled_from(["AAE", "-_8=", "AA==AA==", "", "A", "!!!!", "AAE=\n", "YWJj"])  # unpadded, URL-safe, junk
NUMBER = st.one_of(st.integers(-3, 2**64 + 5), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                   st.none(), st.text(max_size=3))
HEADER = st.fixed_dictionaries({}, optional={"key": st.one_of(st.text(max_size=5), st.integers(0, 3)),
                                             "value": st.one_of(B64, ODD_B64, st.none(), st.integers(0, 2))})
RECORD = st.fixed_dictionaries({}, optional={
    "key": st.one_of(B64, ODD_B64, st.none(), st.integers(0, 2)),
    "value": st.one_of(B64, ODD_B64, st.none(), st.lists(st.integers(0, 2), max_size=2)),
    "partition": NUMBER, "timestamp": NUMBER, "headers": st.one_of(st.lists(HEADER, max_size=3), st.none()),
    "extra": st.integers()})
BODY = st.one_of(st.fixed_dictionaries({"records": st.lists(st.one_of(RECORD, st.none()), max_size=4)}),
                 st.fixed_dictionaries({}, optional={"records": st.one_of(st.integers(), st.text(max_size=3))}),
                 st.lists(st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(BODY)
def test_binary_bodies_read_as_the_models_read_them(body: Any) -> None:
    raw = json.dumps(body).encode()
    assert _verdict(lambda r: parse_produce("binary", r), raw) == _verdict(_models, raw)


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"records": []}', b'{"records": [{"value": "AAE"}]}',
                                 b'{"records": [{"value": "-_8="}]}', b'{"records": [{"partition": 1.0}]}',
                                 b'{"records": [{"partition": -1}]}',
                                 b'{"records": [{"timestamp": 18446744073709551616}]}',
                                 b'{"records": [{"value": "AAE="}], "records": [{"value": "AAI="}]}'])
def test_what_msgspec_refuses_the_models_decide(raw: bytes) -> None:
    assert _verdict(lambda r: parse_produce("binary", r), raw) == _verdict(_models, raw)


def test_a_plain_binary_body_is_read_by_msgspec() -> None:
    raw = json.dumps({"records": [{"key": "AAE=", "value": "AAI=", "partition": 2,
                                   "headers": [{"key": "h", "value": "AAM="}], "timestamp": 5}]}).encode()
    records = parse_produce("binary", raw)
    assert type(records[0]).__module__ == "dm_broker.http.rest.bodies" and type(records[0]).__name__ == "_FastRecord"
    assert [_fields(r) for r in records] == [(b"\0\1", b"\0\2", 2, 5, (("h", b"\0\3"),))]
