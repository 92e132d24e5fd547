"""The control plane's packing and checking (planaria.launch.protocol): pure."""
from __future__ import annotations

import msgpack
from hypothesis import given, strategies as st

from planaria.launch import protocol

SECRET = "s3cret"


@given(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k != "tok"),
                       st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=20), st.binary(max_size=20), st.none()),
                       max_size=6))
def test_a_packed_message_comes_back_without_its_token(fields: dict) -> None:
    msg, why = protocol.unpack(protocol.pack({"type": "x", **fields}, SECRET), SECRET.encode())
    assert why is None and msg == {"type": "x", **fields}


def test_refusals_say_why() -> None:
    key = SECRET.encode()
    assert protocol.unpack(b"\xc1", key) == (None, "undecodable")
    assert protocol.unpack(msgpack.packb([1, 2]), key) == (None, "not a map")
    assert protocol.unpack(msgpack.packb({"type": "hb"}), key) == ({"type": "hb"}, "no token")
    assert protocol.unpack(protocol.pack({"type": "hb"}, "other"), key) == ({"type": "hb"}, "bad token")


def test_the_message_families_do_not_overlap() -> None:
    families = [protocol.RANK_TYPES, protocol.TOOL_TYPES, protocol.QUERY_TYPES, protocol.NODE_TYPES,
                protocol.NODE_DOWN_TYPES]
    assert sum(len(f) for f in families) == len(set().union(*families))
