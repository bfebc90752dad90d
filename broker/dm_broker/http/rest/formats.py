"""Embedded formats of REST Proxy v2 (application/vnd.kafka.<format>.v2+json): how a record's key and
value are written in JSON (binary: base64; json: the JSON value itself). Produce bodies turn them into
bytes as they are parsed (bodies.py); answers turn bytes back here."""

from __future__ import annotations

import re
from typing import Any

import pybase64

from . import jsonio
from .errors import RestError

FORMATS = ("binary", "json")
SCHEMA_FORMATS = ("avro", "jsonschema", "protobuf")
_VND = re.compile(r"^application/vnd\.kafka(?:\.(?P<format>[a-z]+))?\.v(?P<version>\d+)\+json$")


def _media_types(header: str) -> list[str]:
    return [part.split(";")[0].strip().lower() for part in header.split(",") if part.strip()]


def _v2_type(media: str, content_type: str, use: str) -> re.Match[str]:
    """`media` as a v2 vnd.kafka type; 415 for any other type or API version."""
    m = _VND.match(media)
    if m is None:
        raise RestError(415, 41501, f"Content-Type {content_type!r} is not supported: use {use}")
    if m["version"] != "2":
        raise RestError(415, 41501, f"API version v{m['version']} is not served; dm serves REST Proxy API v2")
    return m


def embedded_format_of(content_type: str) -> str:
    """The embedded format a produce body declares; 415 for what dm cannot take."""
    media = _media_types(content_type)[:1]
    if not media or media[0] == "application/json":
        return "json"  # plain JSON bodies: values embedded as JSON
    fmt = _v2_type(media[0], content_type,
                   "application/vnd.kafka.binary.v2+json or application/vnd.kafka.json.v2+json")["format"]
    if fmt in SCHEMA_FORMATS:
        raise RestError(415, 41501, f"the {fmt} format needs a schema registry, which dm does not have: "
                                    "use binary or json")
    if fmt is None or fmt not in FORMATS:
        raise RestError(415, 41501, f"Content-Type {content_type!r} embeds no records format dm knows "
                                    "(binary, json)")
    return fmt


# What a body without records may be declared as: v2's own type, the less specific ones Confluent's REST
# Proxy permits, or nothing (curl -X POST with no body). Anything else (curl's form default, text/plain) is
# not JSON by its own account and is refused rather than parsed as JSON.
REQUEST_TYPES = ("application/vnd.kafka.v2+json", "application/json", "application/vnd.kafka+json",
                 "application/octet-stream")


def check_request_type(content_type: str) -> None:
    """415 for a body on a route without embedded records whose Content-Type is not a JSON v2 one."""
    media = _media_types(content_type)[:1]
    if not media or media[0] in REQUEST_TYPES:
        return
    _v2_type(media[0], content_type, "application/vnd.kafka.v2+json")


def accepted_format(accept: str, instance_format: str) -> None:
    """406 when the Accept header asks for records in a format other than the instance's."""
    media = _media_types(accept)
    if not media:
        return
    wanted = []
    for item in media:
        if item in ("*/*", "application/*", "application/json", "application/vnd.kafka.v2+json"):
            return
        m = _VND.match(item)
        if m is not None and m["version"] == "2":
            if m["format"] in (None, instance_format):
                return
            wanted.append(m["format"])
    if wanted:
        raise RestError(406, 40601, "The requested embedded data format does not match the deserializer for this "
                                    f"consumer instance ({instance_format}, asked for {', '.join(wanted)})")
    raise RestError(406, 40601, f"Accept {accept!r} names nothing this API answers with "
                                f"(application/vnd.kafka.{instance_format}.v2+json)")


def from_bytes(fmt: str, data: bytes | None, where: str) -> Any:
    if data is None:
        return None
    if fmt == "binary":
        return pybase64.b64encode_as_string(data)
    try:
        return jsonio.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise RestError(500, 50002, f"the record at {where} is not JSON; read it with a binary consumer "
                                    "instance") from None


def content_type(fmt: str) -> str:
    return f"application/vnd.kafka.{fmt}.v2+json"
