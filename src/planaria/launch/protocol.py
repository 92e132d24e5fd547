"""The control plane's messages: who sends which, and how one is packed and checked.

Every message is a msgpack map with ``type`` and ``tok`` (the job secret); the fields of each type
are listed in docs/launcher.md ("Control protocol"). This module is the one place that packs and
checks them for the controller and the node agent (pure: no sockets, no state).
"""
from __future__ import annotations

import hmac
from typing import Any

import msgpack

#: from a rank's agent (forwarded as they are by a node agent)
RANK_TYPES = frozenset({"hello", "hb", "fail", "inject", "event", "bye", "incident", "failed-seen", "abort",
                        "knock"})
#: from tools, and from ranks' event API: answered by the controller's tool service
TOOL_TYPES = frozenset({"notify", "ctl", "publish", "lookup", "subscribe", "stdin"})
#: requests answered from the rank table or by a collection (``ps``, ``diagnose``)
QUERY_TYPES = frozenset({"ps", "diagnose"})
#: from a node agent (``planaria.launch.nodeagent``) for the ranks of its host
NODE_TYPES = frozenset({"node-hello", "fwd", "nhb", "gone"})
#: from the controller down to a node agent
NODE_DOWN_TYPES = frozenset({"to", "signal"})


def pack(msg: dict[str, Any], secret: str) -> bytes:
    """``msg`` with the job secret as ``tok``, packed (values msgpack cannot pack become strings)."""
    msg["tok"] = secret
    return msgpack.packb(msg, use_bin_type=True, default=str)


def unpack(payload: bytes, secret: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The message in ``payload`` without its token, or None and why it is refused: undecodable,
    not a map, no token, a bad token (compared in constant time)."""
    try:
        msg = msgpack.unpackb(payload, raw=False)
    except Exception:  # noqa: BLE001 - anything undecodable is refused
        return None, "undecodable"
    if not isinstance(msg, dict):
        return None, "not a map"
    tok = msg.pop("tok", None)
    if isinstance(tok, str):
        tok = tok.encode("utf-8")
    if not isinstance(tok, bytes) or not hmac.compare_digest(tok, secret):
        return msg, "bad token" if tok else "no token"
    return msg, None
