"""The least a REST produce request can cost in one Python process (issue 27's ceiling), served beside
`bench.http`'s broker in the same run.

    .venv/bin/python -m bench.http_floor --port 8099 [--dir /tmp]

POST /topics/{topic} with a binary (base64) produce body is read by aiohttp, parsed by dm's own parser
(msgspec, base64 decoded in the same pass), its records made into one batch by dm's own encoder, that batch
written to a file with pwrite (the page-cache copy a log append makes), and every record answered an offset in
v2's shape. Nothing else: no partitions, no Produce request, no log, no replication, no authorization, no
metrics. Its records per second against the Kafka protocol's is the most an in-process REST Proxy could
reach on this machine (docs/benchmarks.md, ADR 0058).
"""

from __future__ import annotations

import argparse
import operator
import os
import tempfile
import time

from aiohttp import web
from dm_broker.http.rest import jsonio
from dm_broker.http.rest.bodies import parse_produce
from dm_broker.log.records import build_keyless_batch

_VALUE = operator.attrgetter("value")  # as the REST producer takes them


class FloorProducer:
    def __init__(self, directory: str) -> None:
        self.fd = os.open(os.path.join(directory, "floor.log"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.position = 0
        self.next_offset = 0

    async def produce(self, request: web.Request) -> web.Response:
        records = parse_produce("binary", await request.read())
        batch = build_keyless_batch(list(map(_VALUE, records)), timestamp_ms=int(time.time() * 1000))
        os.pwrite(self.fd, batch, self.position)
        self.position += len(batch)
        base, self.next_offset = self.next_offset, self.next_offset + len(records)
        offsets = [{"partition": 0, "offset": offset, "error_code": None, "error": None}
                   for offset in range(base, base + len(records))]
        return web.Response(body=jsonio.dumps({"key_schema_id": None, "value_schema_id": None, "offsets": offsets}),
                            content_type="application/vnd.kafka.v2+json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    import uvloop  # the broker's loop too

    uvloop.install()
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/topics/{topic}", FloorProducer(args.dir).produce)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
