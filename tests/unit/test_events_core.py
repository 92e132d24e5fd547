"""Event core (pure): codes, ranges, handler chain ordering, outcomes, cache, filters."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.events import codes, ranges
from planaria.events.registry import (
    COMPLETE,
    DEFERRED,
    NO_ACTION,
    PARTIAL,
    Event,
    RegistrationError,
    Registry,
)


def test_codes_by_pmix_name_and_user_codes():
    assert codes.parse_code("PMIX_ERR_PROC_ABORTED") == codes.PROC_ABORTED == -7
    assert codes.parse_code("proc-aborted-by-sig") == codes.PROC_ABORTED_BY_SIG == -402
    assert codes.parse_code("EVENT_JOB_END") == codes.JOB_END
    assert codes.parse_code("PMIX_EVENT_NODE_DOWN") == codes.NODE_DOWN
    assert codes.parse_code("USER+3") == codes.user_code(3) == codes.EXTERNAL_BASE - 3
    assert codes.name_of(codes.user_code(3)) == "USER+3"
    assert codes.parse_code("-5000") == -5000
    with pytest.raises(ValueError, match="unknown event code"):
        codes.parse_code("PMIX_NOPE")
    assert all(codes.is_user(codes.user_code(n)) for n in (1, 50))
    assert not any(codes.is_user(c) for c in codes.NAMES)
    # planaria's own codes lie below every user code
    assert codes.parse_code("fault_localized") == codes.FAULT_LOCALIZED < codes.user_code(codes.PLANARIA_SPAN - 1)
    assert codes.name_of(codes.FAULT_LOCALIZED) == "PLANARIA_EVENT_FAULT_LOCALIZED"
    with pytest.raises(ValueError, match="user code numbers"):
        codes.user_code(codes.PLANARIA_SPAN)
    assert codes.FAULT_LOCALIZED not in codes.FAULT_CODES


def test_range_targets():
    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}
    job = ranges.parse_range("job")
    assert ranges.targets(job, 0, hosts) == {0, 1, 2, 3}
    assert ranges.targets(ranges.parse_range("local"), 2, hosts) == {2, 3}
    assert ranges.targets(ranges.parse_range("local"), None, hosts, source_host="a") == {0, 1}
    assert ranges.targets(ranges.parse_range("local"), None, hosts) == set()
    assert ranges.targets(ranges.parse_range("custom", [1, 3, 9]), 0, hosts) == {1, 3}
    assert ranges.targets(ranges.parse_range("proc_local"), 1, hosts) == {1}
    assert ranges.targets(ranges.parse_range("rm"), 1, hosts) == set()
    assert ranges.parse_range("job", [2]).kind == ranges.CUSTOM
    with pytest.raises(ValueError):
        ranges.parse_range("local", [1])
    with pytest.raises(ValueError):
        ranges.parse_range("galaxy")


def _ev(code=-7, source=0, **kw):
    return Event(code=code, source=source, **kw)


def test_chain_stops_at_complete_and_passes_results():
    reg = Registry(me=0)
    seen = []

    def h(name, status, data=None):
        def fn(ev, results):
            seen.append((name, [(r.name, r.status) for r in results]))
            return (status, data) if data else status
        return fn
    reg.register(-7, h("a", PARTIAL, {"x": 1}), name="a", append=True)
    reg.register(-7, h("b", DEFERRED), name="b", append=True)
    reg.register(-7, h("c", COMPLETE), name="c", append=True)
    reg.register(-7, h("d", NO_ACTION), name="d", append=True)
    out = reg.dispatch(_ev())
    assert [r.name for r in out] == ["a", "b", "c"]
    assert out[0].data == {"x": 1}
    assert seen[2] == ("c", [("a", PARTIAL), ("b", DEFERRED)])
    assert "d" not in [s[0] for s in seen]


def test_categories_first_last_and_errors():
    reg = Registry()
    noop = lambda e, r: None  # noqa: E731
    reg.register(None, noop, name="dflt")
    reg.register([-7, -8], noop, name="multi")
    reg.register(-7, noop, name="single")
    reg.register(None, noop, name="z", last=True)
    reg.register(None, noop, name="a", first=True)
    assert reg.names() == ["a", "single", "multi", "dflt", "z"]
    with pytest.raises(RegistrationError):
        reg.register(-7, noop, name="a2", first=True)
    with pytest.raises(RegistrationError):
        reg.register(-7, noop, name="x", before="multi")          # other category
    with pytest.raises(RegistrationError):
        reg.register(-7, noop, name="single")                      # duplicate name
    with pytest.raises(RegistrationError):
        reg.register(-7, noop, name="y", after="nobody")
    reg.register(-7, noop, name="s0", first_in_category=True)
    with pytest.raises(RegistrationError):
        reg.register(-7, noop, name="s1", first_in_category=True)
    with pytest.raises(RegistrationError):
        reg.register(-7, noop, name="s2", before="s0")
    reg.register(-7, noop, name="s3")                             # default: prepend, after s0
    assert reg.names()[:4] == ["a", "s0", "s3", "single"]


# --- ordering property: relative order fixed at registration always holds in the chain
_PLACES = ["prepend", "append", "first_in_category", "last_in_category", "before", "after", "none"]
_CODESETS = [(-7,), (-8,), (-7, -8), None]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PLACES), st.integers(0, 3), st.integers(0, 30)), max_size=25))
def test_chain_order_properties(ops):
    reg = Registry()
    expect = []               # (a, b): a must come before b
    pinned_first, pinned_last = {}, {}
    noop = lambda e, r: None  # noqa: E731
    for i, (place, cs_i, ref_i) in enumerate(ops):
        cs = _CODESETS[cs_i]
        name = f"h{i}"
        cat = 2 if cs is None else (0 if len(cs) == 1 else 1)
        same = [r.name for r in reg.chain() if r.category == cat and r.pin in ("", "first_in_category", "last_in_category")]
        kw = {}
        if place in ("before", "after"):
            if not same:
                continue
            kw[place] = same[ref_i % len(same)]
        elif place != "none":
            kw[place] = True
        before = list(same)
        try:
            reg.register(list(cs) if cs else None, noop, name=name, **kw)
        except RegistrationError:
            if place == "first_in_category":
                assert cat in pinned_first
            elif place == "last_in_category":
                assert cat in pinned_last
            else:
                ref = kw[place]
                assert (place == "before" and pinned_first.get(cat) == ref) or \
                       (place == "after" and pinned_last.get(cat) == ref)
            continue
        if place == "first_in_category":
            pinned_first[cat] = name
            expect += [(name, o) for o in before]
        elif place == "last_in_category":
            pinned_last[cat] = name
            expect += [(o, name) for o in before]
        elif place == "before":
            expect.append((name, kw["before"]))
        elif place == "after":
            expect.append((kw["after"], name))
        elif place == "append":
            expect += [(o, name) for o in before if o != pinned_last.get(cat)]
        else:  # prepend / default
            expect += [(name, o) for o in before if o != pinned_first.get(cat)]
    chain = reg.chain()
    pos = {r.name: i for i, r in enumerate(chain)}
    for a, b in expect:
        assert pos[a] < pos[b], (a, b, reg.names())
    cats = [r.category for r in chain]
    assert cats == sorted(cats)                 # single, then multi, then default
    for cat, name in pinned_first.items():
        assert [r.name for r in chain if r.category == cat][0] == name
    for cat, name in pinned_last.items():
        assert [r.name for r in chain if r.category == cat][-1] == name


def test_cache_replays_to_late_registrant_once_and_evicts():
    reg = Registry(me=1, cache_limit=3)
    for i in range(5):
        reg.dispatch(_ev(code=codes.user_code(1), id=i + 1, info={"i": i}))
    assert reg.evicted == 2 and len(reg.cache) == 3
    got = []
    reg.register(codes.user_code(1), lambda e, r: got.append(e.info["i"]), name="late")
    assert got == [2, 3, 4]                   # the two oldest were evicted
    reg.dispatch(_ev(code=codes.user_code(1), id=9, info={"i": 9}))
    assert got == [2, 3, 4, 9]
    other = []
    reg.register(codes.user_code(2), lambda e, r: other.append(e), name="other")
    assert other == []                        # code filter applies to the replay too
    nocache = Registry(cache_limit=3)
    nocache.dispatch(_ev(id=1, cache=False))
    assert len(nocache.cache) == 0


def test_filters_range_affected_non_default():
    reg = Registry(me=2, host="h1")
    got = []
    reg.register(None, lambda e, r: got.append(("local", e.source)), name="l",
                 range=ranges.parse_range("local"))
    reg.register(None, lambda e, r: got.append(("self", e.source)), name="p",
                 range=ranges.parse_range("proc_local"))
    reg.register(None, lambda e, r: got.append(("aff", e.source)), name="a", affected=[5])
    reg.dispatch(_ev(source=2, source_host="h1", id=1))
    reg.dispatch(_ev(source=3, source_host="h2", id=2, affected=frozenset({5})))
    reg.dispatch(_ev(source=3, source_host="h2", id=3, affected=frozenset({6})))
    reg.dispatch(_ev(source=3, source_host="h1", id=4, info={"non_default": True}))
    assert got == [("aff", 2), ("self", 2), ("local", 2), ("aff", 3)]


def test_handler_exception_is_a_result_not_a_crash():
    reg = Registry()

    def bad(e, r):
        raise RuntimeError("boom")
    reg.register(-7, bad, name="bad")
    reg.register(-7, lambda e, r: COMPLETE, name="good", append=True)
    out = reg.dispatch(_ev())
    assert [x.name for x in out] == ["bad", "good"] and "boom" in out[0].data["error"]


def test_default_handler_aborts_unless_completed(monkeypatch):
    from planaria.events import local
    lp = local._Local()
    calls = []
    lp.abort = lambda reason, ev: calls.append(reason)
    lp.policy = "abort"
    lp.registry.dispatch(_ev(code=codes.user_code(1), id=1))
    assert calls == []                        # not a fault
    res = lp.registry.dispatch(_ev(code=codes.PROC_ABORTED_BY_SIG, id=2, affected=frozenset({3})))
    assert len(calls) == 1 and res[-1].name == local.DEFAULT_HANDLER
    lp2 = local._Local()
    lp2.abort = lambda reason, ev: calls.append(reason)
    lp2.policy = "abort"
    lp2.registry.register(codes.PROC_FAILED_CODES, lambda e, r: COMPLETE, name="resilient", first=False)
    res = lp2.registry.dispatch(_ev(code=codes.PROC_ABORTED, id=3))
    assert [r.name for r in res] == ["resilient"] and len(calls) == 1
    lp3 = local._Local()
    lp3.abort = lambda reason, ev: calls.append(reason)
    lp3.registry.dispatch(_ev(code=codes.PROC_ABORTED, id=4))
    assert len(calls) == 1                    # policy "none": no abort


def test_handle_failures_completes_process_failures_ahead_of_the_default_abort(monkeypatch):
    from planaria.events import local
    lp = local._Local()
    aborts, seen = [], []
    lp.abort = lambda reason, ev: aborts.append(reason)
    lp.policy = "abort"
    monkeypatch.setattr(local, "_L", lp)
    local.handle_failures("mine", lambda ev: seen.append(("old", ev.id)))
    local.handle_failures("mine", lambda ev: seen.append(("new", ev.id)))      # replaces, by name
    res = lp.registry.dispatch(_ev(code=codes.PROC_ABORTED_BY_SIG, id=5, affected=frozenset({2})))
    assert [r.name for r in res] == ["mine"] and res[0].status == COMPLETE
    assert seen == [("new", 5)] and aborts == []
    lp.registry.dispatch(_ev(code=codes.NODE_DOWN, id=6))                     # not a process failure
    assert len(aborts) == 1 and seen == [("new", 5)]


def test_event_wire_roundtrip():
    e = Event(code=-402, source=3, range=ranges.parse_range("custom", [1, 2]), info={"k": 1},
              affected=frozenset({3}), id=7, t=1.5, source_host="h", origin="rm")
    assert Event.from_wire(e.to_wire()) == e


def test_late_registrant_replay_runs_on_the_events_thread():
    import threading

    import planaria.events as ev
    from planaria.events import local
    seen = []
    done = threading.Event()
    local._L.registry.dispatch(_ev(code=ev.user_code(8), id=10_001, info={"v": 1}))

    def h(e, r):
        seen.append((e.info["v"], threading.current_thread().name))
        done.set()
    hid = ev.register(ev.user_code(8), h, name="t-late-thread")
    try:
        assert done.wait(5)
        assert seen == [(1, "planaria-events")]
    finally:
        ev.deregister(hid)


def test_local_notify_runs_off_the_calling_thread():
    import threading

    import planaria.events as ev
    done = threading.Event()
    where = []

    def h(e, r):
        where.append(threading.current_thread().name)
        done.set()
        return COMPLETE
    hid = ev.register(ev.user_code(7), h, name="t-local")
    try:
        ev.notify(ev.user_code(7), range="proc_local", info={"x": 1})
        assert done.wait(5)
        assert where == ["planaria-events"]
    finally:
        ev.deregister(hid)
