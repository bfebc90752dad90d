"""FrameProtocol's receive path: frames come out whole and in order however the bytes arrive, also
when connections interleave on the thread's one staging buffer, and an idle connection keeps no
buffer of its own. Driven through the protocol's own callbacks (get_buffer / buffer_updated), as
the event loop calls them."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest
from dm_broker.protocol.framing import FIRST_CHUNK, OWN_BUFFER_FROM, FrameProtocol, FrameSizeError
from dm_broker.protocol.request_memory import RequestMemory


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


class Transport:
    """The two calls FrameProtocol makes on its transport when it stops and starts reading."""

    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False


def connected(memory: RequestMemory) -> tuple[FrameProtocol, Transport]:
    proto = FrameProtocol(memory=memory)
    transport = Transport()
    proto.transport = transport  # type: ignore[assignment]
    return proto, transport


@pytest.mark.parametrize("seed", range(4))
async def test_frames_survive_a_small_request_memory(seed: int):
    """Frames come out whole and in order while connections keep stopping for memory: a connection is
    fed only while its transport reads, and each frame's memory is given back once it is read."""
    rng = random.Random(seed)
    memory = RequestMemory(100_000)
    payloads = {name: [rng.randbytes(rng.choice([0, 17, 300, OWN_BUFFER_FROM + 9, 70_000, 300_000]))
                       for _ in range(10)] for name in "abc"}
    conns = {name: connected(memory) for name in "abc"}
    streams = {name: b"".join(framed(p) for p in payloads[name]) for name in "abc"}
    got: dict[str, list[bytes]] = {name: [] for name in "abc"}
    while any(streams.values()) or any(p._frames for p, _ in conns.values()):
        readable = [n for n, s in streams.items() if s and not conns[n][1].paused]
        if readable:
            name = rng.choice(readable)
            cut = rng.randint(1, 9000)
            deliver(conns[name][0], streams[name][:cut])
            streams[name] = streams[name][cut:]
        for n, (proto, _) in conns.items():
            if proto._frames and (rng.random() < 0.5 or not readable):
                frame = await proto.read_frame()
                got[n].append(bytes(frame))
                memory.give_back(len(frame))
        assert memory.used <= 100_000 + 300_004  # exceeded by one frame at most (the pool is not strict)
    assert got == payloads
    assert memory.used == 0 and memory.waiting == 0


async def test_a_large_frame_buffer_grows_as_its_bytes_arrive():
    """The buffer follows what arrived; the declared size is reserved in the request memory."""
    memory = RequestMemory(-1)
    proto, _ = connected(memory)
    deliver(proto, struct.pack(">i", 100 << 20) + b"\0" * 8192)
    assert proto._frame is not None and len(proto._frame) == FIRST_CHUNK  # not 100 MiB
    assert memory.used == 100 << 20
    deliver(proto, b"\1" * (FIRST_CHUNK - 8192))
    deliver(proto, b"\2")
    assert len(proto._frame) == 2 * FIRST_CHUNK  # doubled as the bytes came
    assert bytes(proto._frame[FIRST_CHUNK - 1:FIRST_CHUNK + 1]) == b"\1\2"  # and kept in place
    proto.release()
    assert memory.used == 0


async def test_a_used_up_memory_stops_reading_until_memory_is_given_back():
    memory = RequestMemory(10_000)
    holder, _ = connected(memory)
    deliver(holder, framed(b"h" * 12_000))  # one piece larger than the pool goes through
    assert memory.used == 12_000
    proto, transport = connected(memory)
    deliver(proto, framed(b"a" * 10) + framed(b"b" * 20))
    assert transport.paused and proto.waiting_memory and not proto._frames
    assert memory.waiting == 1
    memory.give_back(len(await holder.read_frame()))
    assert not proto.waiting_memory
    assert await drain(proto, 2) == [b"a" * 10, b"b" * 20]  # the bytes that waited, split now
    assert not transport.paused


async def test_a_connection_that_goes_gives_back_what_nobody_read():
    memory = RequestMemory(-1)
    proto, _ = connected(memory)
    deliver(proto, framed(b"x" * 100) + struct.pack(">i", 50_000) + b"\0" * 20_000)
    assert memory.used == 100 + 50_000
    proto.connection_lost(None)
    proto.release()
    assert memory.used == 0


def test_the_pool_wakes_waiters_in_turn_and_counts_depleted_time():
    now = [0.0]
    memory = RequestMemory(100, clock=lambda: now[0])
    woken: list[str] = []
    memory.take(100)
    memory.wait(lambda: (woken.append("first"), memory.take(60)))
    memory.wait(lambda: woken.append("second"))
    now[0] = 2.0
    memory.give_back(50)  # 50 used: the first takes 60 (110 used), the second keeps waiting
    assert woken == ["first"] and memory.waiting == 1
    assert memory.depleted_seconds() == pytest.approx(2.0)
    now[0] = 3.0
    assert memory.depleted_seconds() == pytest.approx(3.0)  # depleted again since 2.0
    memory.give_back(110)
    assert woken == ["first", "second"] and memory.depleted_seconds() == pytest.approx(3.0)
    assert RequestMemory(0).available and RequestMemory(0).limit == -1  # Kafka's "no pool"
