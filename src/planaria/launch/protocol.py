"""The control plane's messages: who sends which, and how one is packed and checked.

Every message is a msgpack map with ``type`` and ``tok`` (the job secret); docs/launcher.md
("Control protocol") describes them too. This module is the one place that packs and checks them
for the controller and the node agent (pure: no sockets, no state).

agent -> controller: ``hello`` {rank, pid, host, role, backend}, ``hb`` {rank, step} (with ``total``
when the announced step count changed, ``cf`` [done, queued, moved, busy %] when a fragments run's
counters changed, at most once a second, ``role`` and ``logical`` when they changed),
``fail`` {rank, reason, id}, ``inject`` {rank, kind, detail}, ``event`` {rank, ...},
``bye`` {rank, code}, ``incident`` {rank, ...} (a localized fault), ``ps`` {} (returns the rank table),
``diagnose`` {k, hop, rounds, interval} (a tool asks for a global state collection; the reply
``diagnosed`` {state, report, ...} comes when the collection tree has answered or timed out).
controller -> agent: ``ack`` {id} for any message with an ``id``, ``hbok`` {} for heartbeats,
``ps`` {ranks: [rank records], t0} for ``ps``. Replies carry ``tok`` too.

Events and tools (docs/events.md, docs/tools.md): ``notify`` {code, source, range, info, affected}
from a rank or a tool is relayed as ``event`` {event} to the ranks in range (and to subscribed
tools); ``abort`` {reason} from a rank's default handler asks the launcher to end the job;
``failed-seen`` {ranks} (a rank's communicator reported failed peers), ``fail``, lost pids and
silent heartbeats are merged into one process-failed event (``planaria.launch.relay``).
``knock`` {ranks} (a rank's localization service wrote to them) wakes those ranks' services with
``knock`` {}; the sender gets ``gone`` {ranks} for those that have ended. ``wake-spares`` {warm} (a
working rank started a recovery, or released the spares; ``warm``: it only sent them its footprint)
sends ``wake`` {warm} to every rank whose role is ``spare``: a spare sleeps between two tests of its
MPI receive and wakes on that message.
Tools: ``ctl`` {action, ranks, signal}, ``publish`` {data, replace}, ``lookup`` {keys, wait,
timeout}, ``log`` {message}, ``subscribe`` {events, io, history} (renewed every second; the
controller then sends ``event`` and ``io`` {rank, channel, text, t} messages), ``stdin``
{ranks, data, eof} (forwarded to those ranks' agents).

Node agents (``planaria.launch.nodeagent``, ``planaria run --node-agents``) speak for the ranks of
a host: ``node-hello`` {node, pid, listen}, ``nhb`` {ranks, steps} (their heartbeats, summed up),
``fwd`` {l, p} (a rank's own message ``p``, handled as if it came from ``Routed(node, l)``),
``gone`` {rank, pid, alive} (a rank's connection closed there), ``npart`` {id, part} (its ranks'
parts of a collection, merged); the controller sends ``to`` {l: [...], p} to reach ranks behind a
node agent, one message per node for an event, ``signal`` {l, sig} for ``planaria ctl``, and
``collect`` {id, l, rounds, interval, budget, hop} for a global diagnosis (the node agent asks its
ranks with ``collect`` {id, rounds, interval}; each answers ``part`` {id, part}).
"""
from __future__ import annotations

from typing import Any

try:    # the constant-time comparison of hmac's, without hmac's import of OpenSSL's _hashlib (~3 ms)
    from _operator import _compare_digest as compare_digest
except ImportError:  # pragma: no cover - other interpreters
    from hmac import compare_digest  # type: ignore[no-redef]  # the same function where _operator has none

import msgpack

#: from a rank's agent (forwarded as they are by a node agent)
RANK_TYPES = frozenset({"hello", "hb", "fail", "inject", "event", "bye", "incident", "failed-seen", "abort",
                        "knock", "wake-spares"})
#: the fields of a heartbeat a node agent sums up (``nhb``); one with more (a role, a step total,
#: task counters) goes to the controller as it is
PLAIN_HB = frozenset({"type", "rank", "step", "t"})
#: from tools, and from ranks' event API: answered by the controller's tool service
TOOL_TYPES = frozenset({"notify", "ctl", "publish", "lookup", "subscribe", "stdin"})
#: requests answered from the rank table or by a collection (``ps``, ``diagnose``)
QUERY_TYPES = frozenset({"ps", "diagnose"})
#: from a node agent (``planaria.launch.nodeagent``) for the ranks of its host
NODE_TYPES = frozenset({"node-hello", "fwd", "nhb", "gone", "npart"})
#: from the controller down to a node agent
NODE_DOWN_TYPES = frozenset({"to", "signal", "collect"})


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
    if not isinstance(tok, bytes) or not compare_digest(tok, secret):
        return msg, "bad token" if tok else "no token"
    return msg, None
