"""msgpack's encoding of plain values, without msgpack's import (``packb``, and ``unpackb`` to read them).

A rank's agent says hello (and its first heartbeats) before it has read anything from the
controller; importing msgpack (with ``msgpack.ext``'s ``datetime``) costs every rank about 2 ms of
CPU at start. ``packb`` writes maps, lists, strings, integers, floats, booleans and None the way
``msgpack.packb(..., use_bin_type=True)`` does, and bytes as ``bin``; for any other value (or an
integer beyond 64 bits) it hands the whole object to msgpack itself.
"""
from __future__ import annotations

import struct

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any

_DOUBLE = struct.Struct(">Bd")


def packb(obj: Any) -> bytes:
    """``msgpack.packb(obj, use_bin_type=True, default=str)``'s bytes."""
    out: list[bytes] = []
    if _pack(obj, out):
        return b"".join(out)
    import msgpack

    return msgpack.packb(obj, use_bin_type=True, default=str)


def _length(n: int, small: int, small_max: int, codes: tuple[int, int, int], out: list[bytes]) -> bool:
    """A string's, a map's or an array's header: fix form up to ``small_max``, else 8/16/32 bits
    (``codes``; 0 where the type has no 8-bit form); False beyond 32 bits."""
    if n <= small_max:
        out.append(bytes((small | n,)))
    elif n < 1 << 8 and codes[0]:
        out.append(bytes((codes[0], n)))
    elif n < 1 << 16:
        out.append(bytes((codes[1],)) + n.to_bytes(2, "big"))
    elif n < 1 << 32:
        out.append(bytes((codes[2],)) + n.to_bytes(4, "big"))
    else:
        return False
    return True


def _int(v: int, out: list[bytes]) -> bool:
    """An integer in its shortest form; False beyond 64 bits."""
    if 0 <= v < 128:
        out.append(bytes((v,)))
        return True
    if -32 <= v < 0:
        out.append(bytes((v & 0xFF,)))
        return True
    forms = ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)) if v >= 0 else ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8))
    for code, size in forms:
        if (v < 1 << (8 * size)) if v >= 0 else (v >= -(1 << (8 * size - 1))):
            out.append(bytes((code,)) + v.to_bytes(size, "big", signed=v < 0))
            return True
    return False


def _pack(v: Any, out: list[bytes]) -> bool:
    """Append ``v``'s encoding to ``out``; False when it holds a value this module does not write."""
    t = type(v)
    if v is None:
        out.append(b"\xc0")
    elif t is bool:
        out.append(b"\xc3" if v else b"\xc2")
    elif t is int:
        return _int(v, out)
    elif t is float:
        out.append(_DOUBLE.pack(0xCB, v))
    elif t is str or t is bytes:
        data = v.encode("utf-8") if t is str else v
        head = (0xA0, 31, (0xD9, 0xDA, 0xDB)) if t is str else (0, -1, (0xC4, 0xC5, 0xC6))
        if not _length(len(data), head[0], head[1], head[2], out):
            return False
        out.append(data)
    elif t is list or t is tuple:
        return _length(len(v), 0x90, 15, (0, 0xDC, 0xDD), out) and all(_pack(x, out) for x in v)
    elif t is dict:
        return (_length(len(v), 0x80, 15, (0, 0xDE, 0xDF), out)
                and all(_pack(k, out) and _pack(x, out) for k, x in v.items()))
    else:
        return False
    return True


_FIXED = {0xCA: (">f", 4), 0xCB: (">d", 8), 0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4),
          0xCF: (">Q", 8), 0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8)}
_SIZED = {0xD9: ("s", 1), 0xDA: ("s", 2), 0xDB: ("s", 4), 0xC4: ("b", 1), 0xC5: ("b", 2), 0xC6: ("b", 4),
          0xDC: ("a", 2), 0xDD: ("a", 4), 0xDE: ("m", 2), 0xDF: ("m", 4)}
_CONST = {0xC0: None, 0xC2: False, 0xC3: True}


def unpackb(data: bytes) -> Any:
    """``msgpack.unpackb(data, raw=False)``, without msgpack's import for the values ``packb`` writes
    (the controller's messages); msgpack itself reads anything else. ValueError on a broken message."""
    try:
        value, end = _read(memoryview(data), 0)
    except NotImplementedError:         # a value this module does not read (an extension type)
        import msgpack

        return msgpack.unpackb(data, raw=False)
    except (IndexError, struct.error, UnicodeDecodeError, TypeError) as exc:
        raise ValueError(f"not a msgpack message: {exc}") from None
    if end != len(data):
        raise ValueError("extra bytes after a msgpack message")
    return value


def _read(buf: memoryview, pos: int) -> tuple[Any, int]:
    """The value at ``pos`` and the position after it."""
    code = buf[pos]
    pos += 1
    if code < 0x80 or code >= 0xE0:
        return (code if code < 0x80 else code - 0x100), pos
    if code < 0x90:
        return _items(buf, pos, code & 0x0F, "m")
    if code < 0xA0:
        return _items(buf, pos, code & 0x0F, "a")
    if code < 0xC0:
        return _chunk(buf, pos, code & 0x1F, "s")
    if code in _CONST:
        return _CONST[code], pos
    if code in _FIXED:
        fmt, size = _FIXED[code]
        return struct.unpack_from(fmt, buf, pos)[0], pos + size
    if code in _SIZED:
        kind, size = _SIZED[code]
        n = int.from_bytes(buf[pos:pos + size], "big")
        pos += size
        return _items(buf, pos, n, kind) if kind in "am" else _chunk(buf, pos, n, kind)
    raise NotImplementedError(f"msgpack type 0x{code:02x}")


def _chunk(buf: memoryview, pos: int, n: int, kind: str) -> tuple[Any, int]:
    """A string (``kind`` "s") or bytes ("b") of ``n`` bytes from ``pos``."""
    if pos + n > len(buf):
        raise IndexError("a string runs past the message")
    chunk = buf[pos:pos + n]
    return (str(chunk, "utf-8") if kind == "s" else bytes(chunk)), pos + n


def _items(buf: memoryview, pos: int, n: int, kind: str) -> tuple[Any, int]:
    """An array (``kind`` "a") or a map ("m") of ``n`` entries from ``pos``."""
    if kind == "a":
        out = []
        for _ in range(n):
            v, pos = _read(buf, pos)
            out.append(v)
        return out, pos
    m = {}
    for _ in range(n):
        k, pos = _read(buf, pos)
        v, pos = _read(buf, pos)
        m[k] = v
    return m, pos
