"""Refused TCP connections are counted by reason from the socket's monitor events; a client that
keeps reconnecting gets one record and then a count every ten seconds."""
from __future__ import annotations

import zmq

from planaria.launch.tcpguard import NOT_ZMTP, SUMMARY_EVERY, HandshakeGuard


def _ev(kind: int, value: int) -> dict:
    return {"event": kind, "value": value, "endpoint": b"tcp://127.0.0.1:5555"}


def test_refusals_by_reason_first_at_once_then_counted():
    g = HandshakeGuard("tcp control socket")
    g.feed(_ev(zmq.EVENT_ACCEPTED, 12), now=0.0)
    g.feed(_ev(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH), now=0.1)
    g.feed(_ev(zmq.EVENT_DISCONNECTED, 12), now=0.1)      # its handshake failed: not counted again
    for t in range(5):                                     # a wrong key, reconnecting
        g.feed(_ev(zmq.EVENT_ACCEPTED, 13), now=1.0 + t)
        g.feed(_ev(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC), now=1.0 + t)
        g.feed(_ev(zmq.EVENT_DISCONNECTED, 13), now=1.0 + t)
    g.feed(_ev(zmq.EVENT_ACCEPTED, 14), now=2.0)           # garbage: closed with no handshake event
    g.feed(_ev(zmq.EVENT_DISCONNECTED, 14), now=2.0)
    g.feed(_ev(zmq.EVENT_ACCEPTED, 15), now=2.0)           # a good client
    g.feed(_ev(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0), now=2.0)
    g.feed(_ev(zmq.EVENT_DISCONNECTED, 15), now=3.0)
    first = g.due(now=3.0)
    assert [r["why"] for r in first] == ["handshake failed: protocol error ZMTP_MECHANISM_MISMATCH",
                                        "handshake failed: protocol error ZMTP_CRYPTOGRAPHIC", NOT_ZMTP]
    assert all("count" not in r and r["peer"] == "tcp control socket" for r in first)
    assert g.due(now=5.0) == []                            # the four later wrong keys wait for the summary
    later = g.due(now=1.0 + SUMMARY_EVERY)
    assert [(r["why"], r["count"]) for r in later] == [("handshake failed: protocol error ZMTP_CRYPTOGRAPHIC", 4)]
    assert g.refused == 7 and g.flush(now=20.0) == []


def test_flush_writes_what_is_still_counted():
    g = HandshakeGuard("tcp control socket")
    for fd in (20, 21):
        g.feed(_ev(zmq.EVENT_ACCEPTED, fd), now=0.0)
        g.feed(_ev(zmq.EVENT_DISCONNECTED, fd), now=0.5)
    assert [r.get("count") for r in g.due(now=1.0)] == [None]
    assert [(r["why"], r["count"], r["since"]) for r in g.flush(now=2.0)] == [(NOT_ZMTP, 1, 0.5)]
