"""Diagnosis of a job that is no longer running, from its event log (``events.jsonl``).

When ranks have died there is no state to collect; what remains is what the ranks and the
launcher recorded: ``fail`` reports (with the rank's call site, the operation it was in and
the failure it had seen, when detection was on), ``lost`` ranks (killed without a word),
injected faults and the incidents of the localization service. The root causes are the
failed or lost ranks whose failure no other failure explains; a rank that failed because it
saw another rank fail (an uncaught ``ProcFailedError`` naming it) is a consequence, and so is a
rank the launcher's job abort ended after another rank had failed.
"""
from __future__ import annotations

from typing import Any

from planaria.diagnose.hangfilter import rank_ranges


def postmortem(events: list[dict[str, Any]], job: str = "",
               summary: list[dict[str, Any]] | None = None,
               last_live: tuple[str, dict[str, Any]] | None = None,
               flight: dict[int, list[dict[str, Any]]] | None = None,
               outcome: str | None = None) -> dict[str, Any]:
    """Report (same top-level keys as the live diagnosis: verdict, root_causes, evidence, text) from ``events``.

    ``summary`` (the rows of the job's ``summary.json``) adds the failed or lost ranks no event
    names: the ranks of a program without planaria's runtime, known from how their process ended.
    Ranks the launcher itself ended (``--timeout``, Ctrl-C, ``--on-hang abort``) are never root
    causes: when they are all there is, the job hung, and ``last_live`` (name and report of the
    last diagnosis the launcher made while the ranks still ran, e.g. just before its timeout kill)
    gives the root causes. ``flight`` (``comm.flight.read_dir`` of the job directory: each rank's
    last count-checked collective per communicator, which outlives a crash) names a count
    mismatch as the root cause of the failures inside that call. ``outcome``: the job's, from its
    manifest; ``not-started`` (the launcher's ``--start-timeout`` found no rank started) is the
    verdict then, whatever else was recorded."""
    if outcome == "not-started":
        return _not_started(job)
    first = _first_failures(events, summary)
    finished = {int(row["rank"]): row for row in summary or []
                if isinstance(row.get("rank"), int) and row.get("state") == "finished"}
    consequences: dict[int, dict[str, Any]] = {}
    roots = _failed_roots(first, events, finished, consequences) + _left_early_roots(first, finished, consequences)
    # ranks the launcher ended (timeout, Ctrl-C, a detected hang) are victims, never causes
    stopped = {int(row["rank"]) for row in summary or []
               if isinstance(row.get("rank"), int) and _by_launcher(str(row.get("ended_by") or ""))}
    victims = [rc for rc in roots if rc["rank_list"][0] in stopped]
    roots = [rc for rc in roots if rc not in victims]
    notes: list[str] = []
    roots = _without_torn_down(roots, consequences, notes)
    roots = _without_aborted(roots, first, consequences, notes)
    roots, library = _without_library_crashes(roots, consequences)
    if library:
        notes.append(library)
    nranks = max([r + 1 for r in first] + [int(row["rank"]) + 1 for row in summary or []
                                           if isinstance(row.get("rank"), int)], default=0)
    roots, mismatch = _mismatch_first(flight, roots, consequences, nranks, bool(victims), last_live, notes)
    evidence: list[str] = []
    if victims:
        ended = str(next(row.get("ended_by") for row in summary or [] if row.get("rank") == victims[0]["rank_list"][0]))
        evidence.append(f"ranks {rank_ranges([rc['rank_list'][0] for rc in victims])} were ended by {ended}")
    live_text: list[str] = []
    if victims and not roots and last_live is not None:
        name, live = last_live
        roots = [dict(rc, source=name) for rc in live.get("root_causes") or []]
        live_text = [f"the launcher's last diagnosis while the ranks ran ({name}):"] + \
            ["  " + ln for ln in str(live.get("text") or "").rstrip().splitlines()]
    if notes:
        evidence.append("; ".join(notes))
    evidence += _consequence_lines(consequences)
    incidents = [dict(e["incident"], by=e.get("by")) for e in events
                 if e.get("type") == "incident" and isinstance(e.get("incident"), dict)]
    for inc in incidents[-10:]:
        evidence.append(f"incident from rank {inc.get('by')}: {inc.get('verdict') or inc.get('kind')}")
    verdict = "dead-ranks" if roots else ("no-failure" if not first else "failures")
    if mismatch:
        verdict = "collective-mismatch"
    if live_text:
        verdict = str(last_live[1].get("verdict") or "hang") if last_live else verdict
    source = "its event log and summary" if summary else "its event log"
    lines = [f"post-mortem diagnosis of job {job} (not running; from {source})".strip()]
    if not first:
        lines.append("no rank failed or was lost")
    if live_text:
        lines.extend(live_text)
    for rc in roots if not live_text else []:
        where = f" at {rc['site']}" if rc.get("site") else ""
        step = f" (step {rc['step']})" if rc.get("step") not in (None, -1) else ""
        lines.append(f"root cause: rank {rc['ranks']} {rc['reason']}{where}{step}")
    for line in evidence:
        lines.append(f"  {line}")
    return {"verdict": verdict, "root_causes": roots, "consequences": {str(k): v for k, v in consequences.items()},
            "evidence": evidence, "text": "\n".join(lines) + "\n", "postmortem": True, "library_crash": library}


def _not_started(job: str) -> dict[str, Any]:
    """The report on a job none of whose ranks started: the launcher is the cause, not the program."""
    cause = ("no rank started: the MPI launcher started none within --start-timeout (it could not start "
             "its daemons, or waited for resources); its own messages are in the job's output.log")
    text = f"post-mortem diagnosis of job {job} (not running; from its event log and summary)\n{cause}\n"
    return {"verdict": "not-started", "root_causes": [], "consequences": {}, "evidence": [cause], "text": text,
            "postmortem": True}


def _first_failures(events: list[dict[str, Any]], summary: list[dict[str, Any]] | None) -> dict[int, dict[str, Any]]:
    """Each failed or lost rank's first report: its ``fail``/``lost`` event, else its summary row
    (a program without the runtime), with the crash site the launcher read when the event has none."""
    first: dict[int, dict[str, Any]] = {}
    for ev in sorted(events, key=lambda e: float(e.get("t_recv") or e.get("t") or 0.0)):
        if ev.get("type") in ("fail", "lost") and isinstance(ev.get("rank"), int):
            first.setdefault(ev["rank"], ev)
    for row in summary or []:
        r = row.get("rank")
        if isinstance(r, int) and r not in first and row.get("state") in ("failed", "lost"):
            first[r] = {"type": "summary", "rank": r, "reason": row.get("how") or row["state"], "t": row.get("t"),
                        "ended_by": row.get("ended_by") or _ended_by(str(row.get("how") or ""))}
    rows = {row["rank"]: row for row in summary or [] if isinstance(row.get("rank"), int)}
    for r, ev in first.items():          # a crashed rank's site and MPI call, from its fatal-error trace
        row = rows.get(r) or {}          # (the launcher read it)
        if not ev.get("site") and row.get("site"):
            ev = first[r] = dict(ev, site=row["site"])
        if row.get("in_call"):
            first[r] = dict(ev, in_call=row["in_call"])
    return first


def _failed_roots(first: dict[int, dict[str, Any]], events: list[dict[str, Any]], finished: dict[int, Any],
                  consequences: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The failed ranks no other failure explains, with how they ended; a rank whose failure names
    another failed (or finished: under ULFM a rank that has left counts as failed for the others)
    rank goes into ``consequences`` instead."""
    by_ctl = {r for e in events if e.get("type") == "ctl" and e.get("action") == "kill" for r in e.get("ranks") or ()}
    injected = {e.get("rank"): e for e in events if e.get("type") == "inject" and e.get("kind") == "kill"}
    io_planned = {e.get("rank"): e for e in events if e.get("type") == "inject" and e.get("kind") == "ioerror"}
    roots: list[dict[str, Any]] = []
    for rank, ev in sorted(first.items()):
        saw = ev.get("saw_failure") or {}
        blamed = [r for r in saw.get("ranks") or [] if (r in first or r in finished) and r != rank]
        if blamed:
            consequences[rank] = {"blames": blamed, "op": saw.get("op"), "comm": saw.get("comm"),
                                  "site": saw.get("site")}
            continue
        if ev.get("type") == "lost":
            how = f"lost: {ev['reason']}" if ev.get("reason") else "lost (killed or crashed, no report)"
        else:
            how = str(ev.get("reason") or "failed")
        if rank in injected:
            how = f"killed by injection ({injected[rank].get('detail')})"
        elif rank in by_ctl and "planaria ctl" not in how:
            how = f"killed by command (planaria ctl): {how}"
        kind = "no-state"
        if rank in io_planned and "OSError" in how:    # the plan's I/O error ended it
            kind, how = "io-fault", f"{how} (injected: {io_planned[rank].get('detail')}; planaria --inject)"
        roots.append({"kind": kind, "ranks": rank_ranges([rank]), "rank_list": [rank], "reason": how,
                      "site": ev.get("site"), "op": (ev.get("op") or {}).get("name"),
                      "step": ev.get("step"), "t": ev.get("t"),
                      **({"in_call": ev["in_call"]} if ev.get("in_call") else {})})
    return roots


def _left_early_roots(first: dict[int, dict[str, Any]], finished: dict[int, Any],
                      consequences: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranks that ended normally while others still communicated with them (their failures name them)."""
    left_early: dict[int, list[int]] = {}
    for rank, c in sorted(consequences.items()):
        for r in c["blames"]:
            if r not in first:
                left_early.setdefault(r, []).append(rank)
    roots = []
    for r, waiters in sorted(left_early.items()):
        row = finished[r]
        code = row.get("exit_code")
        # where it left (its sys.exit), else where the others waited for it (the call it never matched)
        site = row.get("site") or next((consequences[w]["site"] for w in waiters if consequences[w].get("site")), None)
        roots.append({"kind": "finished", "ranks": rank_ranges([r]), "rank_list": [r],
                      "reason": f"ended (exit {0 if code is None else code}) while rank(s) {rank_ranges(waiters)} "
                                f"still communicated with it", "site": site, "op": None,
                      "step": row.get("step"), "t": row.get("t")})
    return roots


def _without_torn_down(roots: list[dict[str, Any]], consequences: dict[int, dict[str, Any]],
                       notes: list[str]) -> list[dict[str, Any]]:
    """``roots`` without the ranks the MPI runtime took down (SIGTERM) after another rank crashed or
    was killed; those become consequences, with a note."""
    teardown = _torn_down(roots)
    if not teardown:
        return roots
    roots = [rc for rc in roots if rc not in teardown]
    crashed = [rc["rank_list"][0] for rc in _crashes(roots)]
    for rc in teardown:
        consequences[rc["rank_list"][0]] = {"blames": crashed, "op": None, "comm": None, "site": None,
                                            "by": "job abort"}
    signalled = any(sig in str(rc.get("reason")) for rc in _crashes(roots) for sig in _CRASH_SIGNALS)
    notes.append(f"ranks {rank_ranges([rc['rank_list'][0] for rc in teardown])} were ended by the MPI "
                 f"runtime (SIGTERM) after rank(s) {rank_ranges(crashed)} "
                 f"{'crashed' if signalled else 'were killed'}")
    return roots


def _without_aborted(roots: list[dict[str, Any]], first: dict[int, dict[str, Any]],
                     consequences: dict[int, dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """``roots`` without the ranks the job abort took down when some other rank failed: not failures
    of their own; they become consequences, with a note."""
    aborted = [rc for rc in roots if str(first.get(rc["rank_list"][0], {}).get("ended_by") or "").startswith(_ABORT)]
    others = [rc["rank_list"][0] for rc in roots if rc not in aborted]
    if not (aborted and others):
        return roots
    gone = [rc["rank_list"][0] for rc in aborted]
    for r in gone:
        consequences[r] = {"blames": others, "op": None, "comm": None, "site": None, "by": "job abort"}
    notes.append(f"ranks {rank_ranges(gone)} were ended by the job abort (default handler) after "
                 f"rank(s) {rank_ranges(others)} had failed")
    return [rc for rc in roots if rc not in aborted]


def _without_library_crashes(roots: list[dict[str, Any]],
                             consequences: dict[int, dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """``roots`` without the ranks that died of a fatal signal inside the creation of a communicator
    while another rank had failed: Open MPI's failure handler crashed them (docs/recovery.md, "A
    limit of the MPI library"), so the other rank's failure is the cause. They become
    consequences; the second item is the line that says so (None when there are none)."""
    crashed = [rc for rc in roots if library_crash(str(rc.get("reason")), rc.get("in_call"))]
    others = [rc["rank_list"][0] for rc in roots if rc not in crashed]
    if not (crashed and others):
        return roots, None
    for rc in crashed:
        consequences[rc["rank_list"][0]] = {"blames": others, "op": rc["in_call"], "comm": None,
                                            "site": rc.get("site"), "by": "library crash"}
    line = library_crash_text([rc["rank_list"][0] for rc in crashed], others,
                              next(s for s in _CRASH_SIGNALS if s in str(crashed[0].get("reason"))),
                              sorted({str(rc["in_call"]) for rc in crashed}))
    return [rc for rc in roots if rc not in crashed], line


def library_crash(how: str, call: str | None) -> bool:
    """Whether a rank that ended ``how`` (``killed by signal 11 (SIGSEGV) ...``) while in ``call``
    (``crashsite.CrashSites.mpi_call``) died of Open MPI 5.0's known crash inside a communicator's creation."""
    return str(call or "").lower() in CREATES_COMM and any(sig in how for sig in _CRASH_SIGNALS)


def library_crash_text(crashed: list[int], others: list[int], sig: str, calls: list[str]) -> str:
    """The line that says which ranks the MPI library's known crash took, in which call, after whose failure."""
    return (f"ranks {rank_ranges(crashed)} crashed inside the MPI library ({sig} in {', '.join(calls)}) after "
            f"rank(s) {rank_ranges(others)} had failed: Open MPI 5.0 can crash a process that learns of a "
            f"failure while a communicator is being created (docs/recovery.md)")


def _consequence_lines(consequences: dict[int, dict[str, Any]]) -> list[str]:
    """One evidence line per (op, communicator, site, blamed ranks) of the ranks that saw a failure."""
    by_site: dict[tuple[Any, ...], list[int]] = {}
    for rank, c in sorted(consequences.items()):
        if c.get("by") in ("job abort", "count mismatch", "library crash"):
            continue
        by_site.setdefault((c["op"], c["comm"], c["site"], tuple(c["blames"])), []).append(rank)
    return [f"ranks {rank_ranges(ranks)} failed in {op} on {comm} at {site}: rank(s) {rank_ranges(list(blames))} "
            f"had failed" for (op, comm, site, blames), ranks in by_site.items()]


def _mismatch_first(flight: dict[int, list[dict[str, Any]]] | None, roots: list[dict[str, Any]],
                    consequences: dict[int, dict[str, Any]], nranks: int, hung: bool,
                    last_live: tuple[str, dict[str, Any]] | None, notes: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """``roots`` with a count mismatch (``_count_mismatch``) first and the ranks it explains taken
    out, its note added to ``notes``; (roots, whether there was one). Also for a ``hung`` job (its
    ranks ended by the launcher): MPI leaves a call with disagreeing counts undefined, and a rank it
    corrupts may look busy or absent to the live diagnosis (seen: the interpreter spinning in a
    dictionary lookup after Open MPI's truncation error), so the mismatch is the cause and the live
    diagnosis's claim only evidence."""
    mismatch = _count_mismatch(flight, roots, consequences, nranks) if (roots or consequences or hung) else None
    if mismatch is None:
        return roots, False
    rc, absorbed, note = mismatch
    notes.append(note)
    if hung and last_live is not None:
        name, live = last_live
        said = next(iter(live.get("root_causes") or []), None)
        if said is not None:
            notes.append(f"the launcher's last diagnosis while the ranks ran ({name}) named "
                         f"rank {said.get('ranks')}: {said.get('reason')}")
    return [rc] + [r for r in roots if r not in absorbed], True


def _count_mismatch(flight: dict[int, list[dict[str, Any]]] | None, roots: list[dict[str, Any]],
                    consequences: dict[int, dict[str, Any]],
                    nranks: int) -> tuple[dict[str, Any], list[dict[str, Any]], str] | None:
    """The root cause for a collective call whose ranks passed buffers of different sizes
    (``comm.flight.size_mismatch``), the roots it explains (ranks of that call that crashed or
    failed in it, not ranks killed on purpose) and the evidence line; None when there is none.
    MPI leaves such a call undefined: it overruns the smaller buffers (a SIGSEGV), truncates, or hangs.
    Without flight records (a program without planaria's runtime), the sizes are read from the
    source line where a rank crashed (``p2pline.coll_bytes``), assuming every rank made that call."""
    from planaria.comm.flight import bytes_text, mismatch_text, size_mismatch
    mm = size_mismatch(flight or {})
    source = ""
    if mm is None and not flight:
        mm = _static_mismatch(roots, nranks)
        source = " (sizes read from the source line for each rank)"
    if mm is None:
        return None
    odd, others = list(mm["odd"]), list(mm["others"])
    call = f"{mm['op']} #{mm['seq']} on {mm['comm']}" if mm.get("seq") else f"{mm['op']} on {mm['comm']}"
    rc = {"kind": "collective-mismatch", "ranks": rank_ranges(odd), "rank_list": odd,
          "reason": mismatch_text(rank_ranges(odd), mm["odd_bytes"], rank_ranges(others), mm["other_bytes"], call),
          "site": mm.get("site"), "op": mm["op"],
          "comm": mm["comm"], "step": None, "t": None}
    inside = set(odd) | set(others)
    absorbed = [r for r in roots if r["rank_list"][0] in inside
                and not any(k in str(r.get("reason")) for k in _KILLED)]
    for r in absorbed:
        consequences[r["rank_list"][0]] = {"blames": odd, "op": mm["op"], "comm": mm["comm"],
                                           "site": r.get("site"), "by": "count mismatch"}
    if absorbed:
        how = "; ".join(f"rank {r['ranks']} {r['reason']}" for r in absorbed)
        note = f"in {call}: {how}"
    else:
        note = (f"{call}: rank(s) {rank_ranges(odd)} passed {bytes_text(mm['odd_bytes'])}, rank(s) "
                f"{rank_ranges(others)} {' or '.join(bytes_text(b) for b in mm['other_bytes'])}")
    return rc, absorbed, note + source


def _static_mismatch(roots: list[dict[str, Any]], nranks: int) -> dict[str, Any] | None:
    """``size_mismatch`` of the collective at the site where a rank crashed, its buffer sizes read
    from the source for every rank; None when no crash site holds one or the sizes agree."""
    from planaria.comm.flight import size_mismatch
    from planaria.diagnose import p2pline
    for rc in _crashes(roots):
        site = rc.get("site")
        got = p2pline.coll_bytes(site, list(range(nranks)), nranks) if site else None
        if got is None:
            continue
        op, sizes = got
        mm = size_mismatch({r: [{"comm": "world", "seq": 0, "op": op, "bytes": b, "site": site}]
                            for r, b in sizes.items()})
        if mm is not None:
            return mm
    return None


_ABORT = "the job abort"
# signals of a process that crashed by itself (not one that was told to end)
_CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL")
#: how the launcher words the end of a rank the runtime took down: SIGTERM, no report, or no record
#: at all when mpiexec ended (``launch.ranktable.LOST_REASON`` / ``UNSETTLED_REASON``)
_NO_RECORD = ("(SIGTERM)", "killed or crashed", "no recorded end")
#: planaria communicator methods that create a communicator (``crashsite.CrashSites.mpi_call``)
CREATES_COMM = frozenset({"split", "split_type", "dup", "idup", "clone", "dup_with_info", "idup_with_info",
                       "create", "create_group", "create_from_group", "create_cart", "create_graph",
                       "create_dist_graph", "create_dist_graph_adjacent", "create_intercomm", "merge",
                       "shrink", "ishrink"})
#: a rank ended on purpose by a signal (its kill, not a crash, but the runtime reacts the same way)
_KILLED = ("killed by command (planaria ctl)", "killed by injection")


def _torn_down(roots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The roots that the MPI runtime ended because another rank crashed (or was killed by
    ``planaria ctl`` or the fault plan).

    Without ULFM, mpiexec ends every rank with SIGTERM once one dies of a signal: those ranks
    (ended by SIGTERM, or lost without a record, no earlier than the first crash: killed before
    the rank recorder wrote their end, or settled only when mpiexec had ended) are consequences
    of the crash, not failures of their own."""
    crashes = _crashes(roots)
    if not crashes:
        return []
    t_crash = min(float(rc.get("t") or 0.0) for rc in crashes)
    return [rc for rc in roots if rc not in crashes and float(rc.get("t") or 0.0) >= t_crash
            and any(word in str(rc.get("reason")) for word in _NO_RECORD)]


def _crashes(roots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The roots that died of a fatal signal or were killed on purpose (``planaria ctl``, the plan)."""
    return [rc for rc in roots if any(sig in str(rc.get("reason")) for sig in _CRASH_SIGNALS + _KILLED)]


def _by_launcher(ended_by: str) -> bool:
    """Ended by the launcher's own decision (timeout, a detected hang) or an interrupt, not by a fault."""
    return ended_by.startswith("the launcher") or ended_by in ("Ctrl-C", "SIGTERM", "SIGHUP")


def _ended_by(how: str) -> str | None:
    """Who ended a rank, from a summary row's ``how`` written before rows carried ``ended_by``."""
    return how[len("ended by "):] if how.startswith("ended by the job abort") else None
