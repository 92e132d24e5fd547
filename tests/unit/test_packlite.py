"""``planaria.util.packlite`` writes what msgpack writes and reads it back as msgpack does, and a rank's start imports neither
msgpack nor the Python modules it takes from their C modules."""
from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest

from planaria.util.packlite import packb, unpackb

EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
         -1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63]
TEXTS = ["", "a", "é" * 5, "x" * 31, "x" * 32, "x" * 255, "x" * 256, "x" * 65535, "x" * 65536]
VALUES = [
    None, True, False, 0.0, -1.5, 1e300, float("inf"), 1764321234.123456,
    b"", b"\x00" * 300, b"y" * 70000,
    [], (), list(range(15)), list(range(16)), list(range(70000)),
    {}, {str(i): i for i in range(15)}, {str(i): i for i in range(16)}, {str(i): i for i in range(70000)},
    {"type": "hello", "rank": 3, "size": 16, "pid": 12345, "host": "vm", "role": "initial", "backend": "ulfm",
     "t": 1764321234.5, "ep": None, "tok": "ab" * 32},
    {"type": "hb", "rank": 0, "step": 7, "cf": [1, 2, 3], "nested": {"a": [None, True, {"b": -7}]}},
    {1: "int key"}, [("tuple", 1)],
]


@pytest.mark.parametrize("value", EDGES + TEXTS + VALUES, ids=lambda v: repr(v)[:40])
def test_the_bytes_are_msgpacks(value):
    assert packb(value) == msgpack.packb(value, use_bin_type=True, default=str)


@pytest.mark.parametrize("value", [{"at": 1j}, {"big": 2**70}, [object()], {"s": {1, 2}}],
                         ids=["complex", "int over 64 bits", "object", "set"])
def test_other_values_go_to_msgpack(value):
    try:
        expected = msgpack.packb(value, use_bin_type=True, default=str)
    except Exception as exc:  # noqa: BLE001 - whatever msgpack raises, packb raises it too
        with pytest.raises(type(exc)):
            packb(value)
        return
    assert packb(value) == expected


def test_a_ranks_start_imports_none_of_them():
    # the runtime's modules of a rank's start: what they load of the standard library and msgpack
    code = ("import sys\n"
            "import planaria.runtime.bootstrap, planaria.runtime.agent, planaria.localize.service\n"
            "import planaria.events.channel, planaria.runtime.nodelink, planaria.localize.iowatch\n"
            "print(' '.join(sorted(m for m in ('socket', 'selectors', 'queue', 'heapq', 'signal', 'msgpack', 'typing',\n"
            "                                  'datetime', 'encodings.ascii') if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


def test_the_agent_knows_a_heartbeats_answer_by_its_bytes():
    # the agent reads "hbok" without msgpack when the controller's packing gives these very bytes
    # (any other bytes take msgpack's way, which reads them too)
    from planaria.launch import protocol

    secret = "ab" * 32
    assert packb({"type": "hbok", "tok": secret}) == protocol.pack({"type": "hbok"}, secret)


def _both_encodings(value):
    out = [msgpack.packb(value, use_bin_type=True)]
    try:
        out.append(msgpack.packb(value, use_bin_type=False))     # str8-less raw strings
    except Exception:  # noqa: BLE001 - only values both forms take
        pass
    return out


@pytest.mark.parametrize("value", EDGES + TEXTS + [v for v in VALUES if not isinstance(v, dict) or
                                                   all(isinstance(k, str) for k in v)],
                         ids=lambda v: repr(v)[:40])
def test_unpackb_reads_what_msgpack_reads(value):
    for data in _both_encodings(value):
        expected = msgpack.unpackb(data, raw=False)
        got = unpackb(data)
        assert got == expected and type(got) is type(expected)


def test_unpackb_reads_single_floats_and_leaves_extensions_to_msgpack():
    assert unpackb(msgpack.packb(1.5, use_single_float=True)) == 1.5
    ext = msgpack.packb({"x": msgpack.ExtType(5, b"ab")})
    assert unpackb(ext) == {"x": msgpack.ExtType(5, b"ab")}


@pytest.mark.parametrize("data", [b"\x92\x01", b"\xa5ab", b"\x01\x02", b"\xd9\x05ab", b"\xc4\x09"],
                         ids=["short array", "short fixstr", "extra bytes", "short str8", "short bin8"])
def test_unpackb_rejects_broken_messages(data):
    with pytest.raises(ValueError):
        unpackb(data)
