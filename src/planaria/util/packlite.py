"""msgpack's encoding of plain values, without msgpack's import.

A rank's agent says hello (and its first heartbeats) before it has read anything from the
controller; importing msgpack (with ``msgpack.ext``'s ``datetime``) costs every rank about 2 ms of
CPU at start. ``packb`` writes maps, lists, strings, integers, floats, booleans and None the way
``msgpack.packb(..., use_bin_type=True)`` does, and bytes as ``bin``; for any other value (or an
integer beyond 64 bits) it hands the whole object to msgpack itself.
"""
from __future__ import annotations

import struct
from typing import Any

_DOUBLE = struct.Struct(">Bd")


class _Unsupported(Exception):
    pass


def packb(obj: Any) -> bytes:
    """``msgpack.packb(obj, use_bin_type=True, default=str)``'s bytes."""
    out: list[bytes] = []
    try:
        _pack(obj, out)
    except _Unsupported:
        import msgpack

        return msgpack.packb(obj, use_bin_type=True, default=str)
    return b"".join(out)


def _length(n: int, small: int, small_max: int, codes: tuple[int, int, int], out: list[bytes]) -> None:
    """A string's, a map's or an array's header: fix form up to ``small_max``, else 8/16/32 bits
    (``codes``; 0 where the type has no 8-bit form)."""
    if n <= small_max:
        out.append(bytes((small | n,)))
    elif n < 1 << 8 and codes[0]:
        out.append(bytes((codes[0], n)))
    elif n < 1 << 16:
        out.append(bytes((codes[1],)) + n.to_bytes(2, "big"))
    elif n < 1 << 32:
        out.append(bytes((codes[2],)) + n.to_bytes(4, "big"))
    else:
        raise _Unsupported


def _int(v: int, out: list[bytes]) -> None:
    if 0 <= v < 128:
        out.append(bytes((v,)))
    elif -32 <= v < 0:
        out.append(bytes((v & 0xFF,)))
    elif v >= 0:
        for code, size in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
            if v < 1 << (8 * size):
                out.append(bytes((code,)) + v.to_bytes(size, "big"))
                return
        raise _Unsupported
    else:
        for code, size in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
            if v >= -(1 << (8 * size - 1)):
                out.append(bytes((code,)) + v.to_bytes(size, "big", signed=True))
                return
        raise _Unsupported


def _pack(v: Any, out: list[bytes]) -> None:
    t = type(v)
    if v is None:
        out.append(b"\xc0")
    elif t is bool:
        out.append(b"\xc3" if v else b"\xc2")
    elif t is int:
        _int(v, out)
    elif t is float:
        out.append(_DOUBLE.pack(0xCB, v))
    elif t is str:
        data = v.encode("utf-8")
        _length(len(data), 0xA0, 31, (0xD9, 0xDA, 0xDB), out)
        out.append(data)
    elif t is bytes:
        _length(len(v), 0, -1, (0xC4, 0xC5, 0xC6), out)
        out.append(v)
    elif t is list or t is tuple:
        _length(len(v), 0x90, 15, (0, 0xDC, 0xDD), out)
        for x in v:
            _pack(x, out)
    elif t is dict:
        _length(len(v), 0x80, 15, (0, 0xDE, 0xDF), out)
        for k, x in v.items():
            _pack(k, out)
            _pack(x, out)
    else:
        raise _Unsupported
