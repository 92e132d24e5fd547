"""Event notification in a real job (argv[1] = mode).

events: handler chain with ordering attributes, ranges, cached events for a late registrant.
resilient: Resilient with a spare; prints the failure events its resilient handler completed.
tools: a loop that prints, publishes/looks up key-values, logs, and reads pushed stdin.
"""
import json
import sys
import threading
import time

import numpy as np

import planaria as pl
import planaria.events as ev

mode = sys.argv[1]
comm = pl.world()
rank = comm.rank

if mode == "events":
    U = ev.user_code
    order, seen = [], {}
    done = threading.Event()

    def h(name, status=None):
        def fn(e, results):
            if e.code == U(1):
                order.append(name)
                seen[name] = [r.name for r in results]
                if name == "E":
                    done.set()
            return status
        return fn
    ev.register(U(1), h("A"), name="A", first_in_category=True)
    ev.register(U(1), h("B"), name="B", prepend=True)
    ev.register(U(1), h("C", ev.PARTIAL), name="C", append=True)
    ev.register(U(1), h("D"), name="D", before="C")
    ev.register([U(1), U(9)], h("E", ev.COMPLETE), name="E")
    ev.register(None, h("F"), name="F")
    ev.register(None, h("G"), name="G", first=True)
    got = []
    lock = threading.Lock()

    def rec(e, results):
        with lock:
            got.append((e.code, e.source))
        return ev.COMPLETE
    ev.register([U(3), U(4), U(5)], rec, name="ranges")
    only1 = []
    ev.register(U(6), lambda e, r: only1.append(e.source), name="from1", range="custom", ranks=[1])
    comm.barrier()
    if rank == 0:
        ev.notify(U(1), info={"phase": "test"})
        ev.notify(U(2), info={"for": "late"})
        ev.notify(U(3), range="custom", ranks=[1, 2])
        ev.notify(U(4), range="local")
        ev.notify(U(5), range="proc_local")
    if rank in (0, 1):
        ev.notify(U(6))
    done.wait(10)
    time.sleep(1.0)
    late = []
    ev.register(U(2), lambda e, r: late.append(e.info.get("for")), name="late")
    t_late = time.time()
    while not late and time.time() - t_late < 5:     # the replay runs on the events thread
        time.sleep(0.01)
    comm.barrier()
    print("RESULT " + json.dumps({"rank": rank, "order": order, "seen_by_E": seen.get("E"),
                                  "ranges": sorted(c for c, _ in got), "only1": sorted(only1),
                                  "late": late}), flush=True)
elif mode == "resilient":
    from planaria.checkpoint import MemoryStore
    from planaria.recovery.driver import Resilient
    steps = int(sys.argv[2])
    res = Resilient(MemoryStore(copies=1), every=5)

    def step(c, state, i):
        state["x"] += 1
        c.Allreduce(np.ones(1), np.zeros(1))
        time.sleep(0.05)
    state = res.run(lambda c: {"x": np.zeros(4)}, step, steps)
    time.sleep(0.3)
    print("RESULT " + json.dumps({"world": rank, "logical": res.logical_rank,
                                  "events": [[e.name, sorted(e.affected)] for e in res.failure_events]}),
          flush=True)
elif mode == "tools":
    seconds = float(sys.argv[2])
    if rank == 0:
        ev.publish(ready="yes")
        ev.log("tools job started", ranks=comm.size)
    t0 = time.time()
    stdin_lines = []
    out_lock = threading.Lock()

    def say(text: str) -> None:
        # two threads print here: print() writes the text and its newline in two calls, so
        # unlocked lines from the reader and the main loop can interleave mid-line
        with out_lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def reader():
        while time.time() - t0 < seconds:
            line = sys.stdin.readline()
            if line:
                stdin_lines.append(line.strip())
                say(f"STDIN {rank} {line.strip()}")
            else:
                time.sleep(0.05)
    threading.Thread(target=reader, daemon=True).start()
    if rank == 1:
        say(f"LOOKUP {rank} {ev.lookup_value('answer', timeout=seconds)}")
    if rank == 2:
        t_wait = time.time()
        try:
            ev.lookup_value("never", timeout=0.5)
        except ev.NotPublished as exc:         # says so after the time given, not a silent default
            say(f"NOTPUB {rank} {round(time.time() - t_wait, 1)} {exc}")
        assert ev.lookup("never", wait=True, timeout=0.2) == {}
    i = 0
    while time.time() - t0 < seconds:
        pl.step(i)
        if i % 10 == 0:
            say(f"tick {rank} {i}")
            if ev.lookup("stop"):             # the test publishes stop=1 when it is done
                break
        i += 1
        time.sleep(0.05)
    say(f"done {rank}")
