"""Kafka's binary encodings for the records dm writes to its internal topics (`__consumer_offsets`,
`__transaction_state`, control records): fixed-width integers, strings and bytes, and the flexible
versions' unsigned varints, compact strings and tagged fields. Big-endian, as Kafka."""

from __future__ import annotations

import struct
import uuid


class FormatError(ValueError):
    """A record that does not decode (truncated, or of a version dm does not know)."""


class Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> Writer:
        self.buf += struct.pack(">b", v)
        return self

    def i16(self, v: int) -> Writer:
        self.buf += struct.pack(">h", v)
        return self

    def i32(self, v: int) -> Writer:
        self.buf += struct.pack(">i", v)
        return self

    def i64(self, v: int) -> Writer:
        self.buf += struct.pack(">q", v)
        return self

    def uvarint(self, v: int) -> Writer:
        while v & ~0x7F:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def string(self, v: str | None) -> Writer:
        if v is None:
            return self.i16(-1)
        data = v.encode()
        self.i16(len(data))
        self.buf += data
        return self

    def compact_string(self, v: str | None) -> Writer:
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        self.uvarint(len(data) + 1)
        self.buf += data
        return self

    def bytes_(self, v: bytes | None) -> Writer:
        if v is None:
            return self.i32(-1)
        self.i32(len(v))
        self.buf += v
        return self

    def compact_bytes(self, v: bytes) -> Writer:
        self.uvarint(len(v) + 1)
        self.buf += v
        return self

    def uuid(self, v: uuid.UUID) -> Writer:
        self.buf += v.bytes
        return self

    def compact_array_len(self, n: int) -> Writer:
        return self.uvarint(n + 1)

    def tagged(self, fields: dict[int, bytes]) -> Writer:
        """Tagged fields (flexible versions): the count, then each tag, size and value, by tag."""
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag).uvarint(len(fields[tag]))
            self.buf += fields[tag]
        return self

    def done(self) -> bytes:
        return bytes(self.buf)


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError("truncated record")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise FormatError("varint too long")

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def compact_bytes(self) -> bytes:
        return self._take(self.uvarint() - 1)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def compact_array_len(self) -> int:
        """The element count of a compact array (-1 for null)."""
        return self.uvarint() - 1

    def tagged(self) -> dict[int, bytes]:
        return {self.uvarint(): self._take(self.uvarint()) for _ in range(self.uvarint())}

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos
