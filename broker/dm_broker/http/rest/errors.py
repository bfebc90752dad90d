"""REST Proxy v2 errors: an HTTP status and a JSON body {"error_code", "message"}, where error_code is the
status times 100 plus a subcode, with Confluent's subcodes so existing clients recognise them."""

from __future__ import annotations

from aiohttp import web

from . import jsonio

TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CONSUMER_INSTANCE_NOT_FOUND = 40403
LEADER_NOT_AVAILABLE = 40404
CONSUMER_FORMAT_MISMATCH = 40601
CONSUMER_ALREADY_SUBSCRIBED = 40901
CONSUMER_ALREADY_EXISTS = 40902
ILLEGAL_STATE = 40903
KEY_SCHEMA_MISSING = 42201
VALUE_SCHEMA_MISSING = 42202
INVALID_CONSUMER_CONFIG = 42204
INVALID_REQUEST = 42205  # a body that parses but says something impossible (a bad offset, base64, ...)
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003

# Per-record errors in a produce answer's "offsets" (Confluent's: 1 fails again, 2 may succeed if retried).
RECORD_NOT_RETRIABLE = 1
RECORD_RETRIABLE = 2

V2_JSON = "application/vnd.kafka.v2+json"


class RestError(Exception):
    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


def error_response(status: int, error_code: int, message: str, headers: dict[str, str] | None = None
                   ) -> web.Response:
    return web.Response(body=jsonio.dumps({"error_code": error_code, "message": message}), status=status,
                        content_type=V2_JSON, headers=headers)


def not_found_topic(topic: str) -> RestError:
    return RestError(404, TOPIC_NOT_FOUND, f"Topic {topic} not found.")


def not_found_partition(topic: str, partition: int) -> RestError:
    return RestError(404, PARTITION_NOT_FOUND, f"Partition {partition} of topic {topic} not found.")


def unprocessable(message: str, code: int = INVALID_REQUEST) -> RestError:
    return RestError(422, code, message)


def forbidden(message: str) -> RestError:
    return RestError(403, 40301, message)
