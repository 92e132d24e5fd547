"""Runtime fault localization ([Gao 2024], section 2.2): error records, responsible ranks, rule base.

A rank that sees an error (a message or collective timeout, a failed peer, an I/O
error) builds an :class:`ErrorRecord` (the 5-tuple <src, dst, time, type, status>)
and sends it to the *responsible rank* of the suspect (:func:`responsible`: the
lowest rank of the next host, so a node failure never silences the rank that
analyses it).  The responsible rank feeds the record to its :class:`RuleBase`, which
dedups it against recent probes, merges it with related records, correlates
incidents (a failed node explains the timeouts it causes) and says which probe to
run (ping, status, vote).  ``RuleBase.incidents()`` gives the root causes.

Modules:

- :mod:`planaria.localize.records`: the record, error types, probe statuses, packing
  into one short message (at most ``MAX_PROBE_PAYLOAD`` bytes).
- :mod:`planaria.localize.topology`: host groups, responsible ranks, vote groups.
- :mod:`planaria.localize.rules`: the rule base and the rule file format (TOML).

These three modules are pure (stdlib + msgpack): no MPI, no clock.

>>> from planaria.localize import ErrorRecord, RuleBase, MSG_TIMEOUT
>>> rb = RuleBase.default(hosts=["a", "a", "b", "b"])
>>> rb.submit(ErrorRecord(src=0, dst=2, time=10.0, type=MSG_TIMEOUT)).probe.kind
'ping'
>>> rb.submit(ErrorRecord(src=1, dst=2, time=10.5, type=MSG_TIMEOUT)).probe.kind
'vote'
>>> rb.incidents()[0].root_cause()["verdict"]
'rank 2 unresponsive: ranks 0-1 time out on it'
"""
from planaria._lazy import reexport

_RECORDS = ("COLL_TIMEOUT", "CONFIRMED", "DETECTED", "ERROR_TYPES", "EXTERNAL", "IO_ERROR",
            "MAX_PROBE_PAYLOAD", "MERGED", "MSG_TIMEOUT", "NETWORK", "NO_SEND", "PEER_COMPUTING",
            "PING_TIMEOUT", "PROBING", "PROC_FAILED", "REFUTED", "SLOW_MESSAGE", "STATUSES", "ErrorRecord")
_RULES = ("PING", "STATUS", "VOTE", "CorrelationRule", "Decision", "FieldMergeRule", "Incident",
          "KindCorrelationRule", "MergeRule", "Probe", "Rule", "RuleBase", "Verdict", "load_rules")
_TOPOLOGY = ("Topology", "group_of", "host_groups", "responsible", "responsibles", "voters")

# loaded on first use: a rank's probe service (``.service``) needs the records at start, the rule
# base (and its TOML parser) only on the rank that analyses an error
__getattr__ = reexport(__name__, {**dict.fromkeys(_RECORDS, ".records"), **dict.fromkeys(_RULES, ".rules"),
                                  **dict.fromkeys(_TOPOLOGY, ".topology")}, globals())

__all__ = [
    "COLL_TIMEOUT", "CONFIRMED", "DETECTED", "ERROR_TYPES", "EXTERNAL", "IO_ERROR", "MAX_PROBE_PAYLOAD",
    "MERGED", "MSG_TIMEOUT", "NETWORK", "NO_SEND", "PEER_COMPUTING", "PING_TIMEOUT", "PROBING",
    "PROC_FAILED", "REFUTED", "SLOW_MESSAGE", "STATUSES", "ErrorRecord",
    "PING", "STATUS", "VOTE", "CorrelationRule", "Decision", "FieldMergeRule", "Incident",
    "KindCorrelationRule", "MergeRule", "Probe", "Rule", "RuleBase", "Verdict", "load_rules",
    "Topology", "group_of", "host_groups", "responsible", "responsibles", "voters",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
