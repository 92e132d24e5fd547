"""Collection tree pieces: chunking, depth, merging parts, and a subtree that never answers."""
import time

import msgpack
import zmq
from hypothesis import given, strategies as st

from planaria.diagnose import collect
from planaria.events import curve


@given(st.lists(st.integers(0, 10**6), unique=True, max_size=300), st.integers(1, 20))
def test_chunks_partition_in_order(ranks, k):
    parts = collect.chunks(ranks, k)
    assert [r for p in parts for r in p] == ranks
    assert all(parts) and len(parts) <= k
    if parts:
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1


@given(st.integers(1, 200000), st.integers(2, 16))
def test_depth_covers_every_rank(n, k):
    d = collect.depth(n, k)
    reach, width = 0, 1
    for _ in range(d):          # ranks reachable with d levels of k-ary fan-out (chunk heads)
        width *= k
        reach += width
    assert reach >= n
    assert collect.depth(n, k) <= collect.depth(n + 1, k)


def _part(rank, stacks, sample_ids):
    return {"stacks": stacks, "ranks": [{"rank": rank, "threads": [{"name": "MainThread", "stack": sample_ids[0],
                                                                    "samples": sample_ids}]}], "missing": []}


def test_merge_reinterns_stacks_and_keeps_unsampled_marks():
    a = _part(0, [[["a.py", 1, "f"]], [["b.py", 2, "g"]]], [1, 0])
    b = _part(1, [[["b.py", 2, "g"]]], [0, -1])
    m = collect.merge_parts([a, b, {"missing": [5, 6]}])
    assert len(m["stacks"]) == 2
    th0, th1 = (r["threads"][0] for r in m["ranks"])
    assert [m["stacks"][i] for i in th0["samples"]] == [[["b.py", 2, "g"]], [["a.py", 1, "f"]]]
    assert m["stacks"][th1["samples"][0]] == [["b.py", 2, "g"]] and th1["samples"][1] == -1
    assert m["missing"] == [5, 6]


def test_silent_subtree_is_recorded_missing_within_budget():
    """A chunk head that never answers costs at most the budget; its whole chunk is missing."""
    ctx = zmq.Context()
    mute = ctx.socket(zmq.ROUTER)                      # accepts requests, never replies
    curve.serve(mute, "s")                             # over TCP the tree speaks CurveZMQ
    port = mute.bind_to_random_port("tcp://127.0.0.1")
    answering = ctx.socket(zmq.ROUTER)
    curve.serve(answering, "s")
    port2 = answering.bind_to_random_port("tcp://127.0.0.1")
    try:
        eps = {r: f"tcp://127.0.0.1:{port}" for r in range(0, 3)}          # chunk [0, 1, 2]: mute head
        eps.update({r: f"tcp://127.0.0.1:{port2}" for r in range(3, 9)})  # chunks [3, 4, 5], [6, 7, 8]
        eps[6] = None                                  # never said hello: rank 7 heads [7, 8]
        import threading

        def serve():
            for _ in range(2):
                if answering.poll(5000):
                    ident, payload = answering.recv_multipart()
                    req = msgpack.unpackb(payload, raw=False)
                    part = {"stacks": [], "ranks": [{"rank": r, "threads": []} for r in req["ranks"]], "missing": []}
                    answering.send_multipart([ident, msgpack.packb({"tok": "s", "id": req["id"], "part": part})])
        t = threading.Thread(target=serve)
        t.start()
        t0 = time.monotonic()
        part = collect.collect(eps, "s", k=3, hop=0.3, rounds=1, interval=0.0, ctx=ctx)
        took = time.monotonic() - t0
        t.join()
    finally:
        mute.close(0)
        answering.close(0)
        ctx.term()
    assert sorted(part["missing"]) == [0, 1, 2, 6]
    assert sorted(r["rank"] for r in part["ranks"]) == [3, 4, 5, 7, 8]
    budget = collect.budget_for(9, 3, 0.3, 1, 0.0) + 0.3
    assert took <= budget + 0.5, (took, budget)


def test_wrong_token_replies_are_ignored():
    ctx = zmq.Context()
    liar = ctx.socket(zmq.ROUTER)
    curve.serve(liar, "s")
    port = liar.bind_to_random_port("tcp://127.0.0.1")
    import threading

    def serve():
        if liar.poll(5000):
            ident, payload = liar.recv_multipart()
            req = msgpack.unpackb(payload, raw=False)
            liar.send_multipart([ident, msgpack.packb({"tok": "wrong", "id": req["id"],
                                                       "part": {"ranks": [{"rank": 0}]}})])
    t = threading.Thread(target=serve)
    t.start()
    try:
        part = collect.collect({0: f"tcp://127.0.0.1:{port}"}, "s", k=2, hop=0.2, ctx=ctx)
    finally:
        t.join()
        liar.close(0)
        ctx.term()
    assert part["ranks"] == [] and part["missing"] == [0]


def test_a_tree_socket_without_the_job_key_gets_no_request():
    """Over TCP a request is CurveZMQ-encrypted for the job's key: a listener with another key (or
    none) never reads it, and its ranks are missing."""
    ctx = zmq.Context()
    other = ctx.socket(zmq.ROUTER)
    curve.serve(other, "another job's secret")
    port = other.bind_to_random_port("tcp://127.0.0.1")
    plain = ctx.socket(zmq.ROUTER)
    port2 = plain.bind_to_random_port("tcp://127.0.0.1")
    try:
        part = collect.collect({0: f"tcp://127.0.0.1:{port}", 1: f"tcp://127.0.0.1:{port2}"}, "s", k=1,
                               hop=0.3, ctx=ctx)
        assert not other.poll(0) and not plain.poll(0)
    finally:
        other.close(0)
        plain.close(0)
        ctx.term()
    assert part["ranks"] == [] and sorted(part["missing"]) == [0, 1]
