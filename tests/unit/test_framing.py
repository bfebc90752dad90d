"""FrameProtocol's receive path: frames come out whole and in order however the bytes arrive, also
when connections interleave on the thread's one staging buffer, and an idle connection keeps no
buffer of its own. Driven through the protocol's own callbacks (get_buffer / buffer_updated), as
the event loop calls them."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest
from dm_broker.protocol.framing import OWN_BUFFER_FROM, FrameProtocol, FrameSizeError


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def deliver(proto: FrameProtocol, data: bytes) -> None:
    """What the loop does for one recv of `data`: possibly in several get_buffer rounds."""
    while data:
        buf = proto.get_buffer(-1)
        n = min(len(buf), len(data))
        buf[:n] = data[:n]
        proto.buffer_updated(n)
        data = data[n:]


async def drain(proto: FrameProtocol, count: int) -> list[bytes]:
    return [bytes(await proto.read_frame()) for _ in range(count)]


@pytest.mark.parametrize("seed", range(5))
async def test_frames_survive_any_split_and_interleaving(seed: int):
    rng = random.Random(seed)
    payloads = {name: [rng.randbytes(rng.choice([0, 1, 17, 300, OWN_BUFFER_FROM - 5, OWN_BUFFER_FROM + 9, 70_000]))
                       for _ in range(12)] for name in "ab"}
    protos = {name: FrameProtocol() for name in "ab"}
    streams = {name: b"".join(framed(p) for p in payloads[name]) for name in "ab"}
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    while any(streams.values()):
        name = rng.choice([n for n, s in streams.items() if s])
        cut = rng.randint(1, 9000)
        deliver(protos[name], streams[name][:cut])
        streams[name] = streams[name][cut:]
        for n, proto in protos.items():  # read as they come, so reading never pauses
            while proto._frames:
                got[n].append(bytes(await proto.read_frame()))
    assert got == payloads


async def test_an_idle_connection_keeps_no_bytes():
    proto = FrameProtocol()
    deliver(proto, framed(b"x" * 100) + framed(b"y" * 50)[:7])
    assert proto._partial == framed(b"y" * 50)[:7]  # only the frame still arriving
    deliver(proto, framed(b"y" * 50)[7:])
    assert await drain(proto, 2) == [b"x" * 100, b"y" * 50]
    assert proto._partial == b"" and proto._frame is None


async def test_an_oversized_frame_fails_the_connection():
    proto = FrameProtocol(max_size=1000)
    deliver(proto, struct.pack(">i", 5000) + b"z" * 10)
    with pytest.raises(FrameSizeError):
        await proto.read_frame()


async def test_end_of_stream_reports_the_partial_frame():
    proto = FrameProtocol()
    deliver(proto, framed(b"abc")[:5])
    proto.eof_received()
    with pytest.raises(asyncio.IncompleteReadError) as raised:
        await proto.read_frame()
    assert raised.value.partial == framed(b"abc")[:5]
