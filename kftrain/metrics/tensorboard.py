"""TensorBoard event files without TensorFlow: scalar summaries in TFRecord framing, standard library only.

A record is ``uint64 length, uint32 masked_crc32c(length), data, uint32 masked_crc32c(data)``; data is a hand-encoded
``tensorflow.Event`` with only what scalars need (``wall_time`` 1, ``step`` 2, ``file_version`` 3 =
``"brain.Event:2"`` first, ``summary`` 5: ``tag`` 1, ``simple_value`` 2). Checked with
``tf.compat.v1.train.summary_iterator``. A value beyond float32's range is clamped, and :func:`scalar_events` names it.
"""

from __future__ import annotations

import socket
import struct
import time


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 on the wire: a negative step is ten bytes of two's complement
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2) + _varint(len(data)) + data


FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]  # 3.4028234663852886e+38


def float32(value: float) -> float:
    """``value`` within float32's range: beyond it, the largest float32 of its sign (``struct`` would raise)."""
    return max(-FLOAT32_MAX, min(FLOAT32_MAX, value))


def event(wall_time: float, step: int = 0, *, scalars: dict[str, float] | None = None, version: str = "") -> bytes:
    """One serialized Event: the file version, or scalar values at ``step``."""
    data = _field(1, 1) + struct.pack("<d", wall_time) + _field(2, 0) + _varint(step)
    if version:
        data += _bytes_field(3, version.encode())
    if scalars:
        values = b"".join(
            _bytes_field(
                1, _bytes_field(1, tag.encode("utf-8", "replace")) + _field(2, 5) + struct.pack("<f", float32(value))
            )
            for tag, value in scalars.items()
        )
        data += _bytes_field(5, values)
    return data


def record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked(length)) + data + struct.pack("<I", _masked(data))


def event_file_name(wall_time: float | None = None) -> str:
    """The name TensorBoard looks for: ``events.out.tfevents.<seconds>.<host>``."""
    return f"events.out.tfevents.{int(wall_time if wall_time is not None else time.time())}.{socket.gethostname()}"


def scalar_events(
    points: list[dict[str, float]], axis: str, *, wall_time: float | None = None, clamped: set[str] | None = None
) -> bytes:
    """A whole event file for ``points``: each point's numbers (but the axis) as scalars at its ``axis`` value.

    The tags of values beyond float32's range (stored clamped) are added to ``clamped``."""
    now = wall_time if wall_time is not None else time.time()
    out = [record(event(now, version="brain.Event:2"))]  # joined once: appending to bytes was quadratic
    for n, point in enumerate(points, start=1):
        step = int(point[axis]) if axis and axis in point else n
        scalars = {k: v for k, v in point.items() if k != axis}
        if scalars:
            out.append(record(event(now, step, scalars=scalars)))
            if clamped is not None:
                clamped.update(k for k, v in scalars.items() if abs(v) > FLOAT32_MAX)
    return b"".join(out)
