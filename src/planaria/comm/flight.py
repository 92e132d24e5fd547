"""The flight record: each rank's last count-checked collective per communicator, kept in a
file that outlives the rank.

A rank that dies inside a collective (a count mismatch overruns a buffer: SIGSEGV inside
``Allreduce``) leaves no state to collect, and without ULFM the MPI runtime takes every other
rank down with it. What the diagnosis needs is what each rank had passed. With detection on,
every collective whose counts must agree on all ranks (``OPS``) writes, on entry, its number on
the communicator (``_ml_seq``), the operation, the bytes of its buffer and the call site into this
rank's slot for the communicator: a few stores into a file mapped shared (``mmap``), whose pages
the kernel keeps when the process dies. ``read_dir`` reads the files back and
``size_mismatch`` finds the ranks whose count disagrees in the same call.

Layout (little-endian 64-bit words, ``WORDS`` per slot): a header (magic, world rank, slots,
code entries, ``sys.hexversion``), then ``SLOTS`` slots ``(seq, op, bytes, code, instruction
offset)`` written data first and ``seq`` last (the C note keeps the address of the slot's last
code object in its sixth word, which no reader uses), the communicator ids (``CID_BYTES`` each) and the
code table (``path\\0function\\0first line``, ``CODE_BYTES`` each, written once per code object).
Only this module knows the layout.

The note is written by ``flightnote.c`` where it is built for the rank's interpreter
(``note_build``: ``planaria run`` builds it once per machine; ``PLANARIA_FLIGHT_NOTE=python`` keeps
the Python note), else by the Python function below: the same words either way. Between two collectives of a kernel, whose data has
pushed the interpreter's code and objects out of the CPU's caches, the Python note costs several
microseconds (it makes a frame object for ``sys._getframe``, looks attributes up, stores through a
memoryview); the C one reads the interpreter's frames and stores five words
(``python -m benchmarks detect --note-cost``).
"""
from __future__ import annotations

import mmap
import os
import struct
import sys
from functools import lru_cache
from planaria.util.env import PLANARIA_FLIGHT_NOTE, PLANARIA_JOB_DIR, PLANARIA_RESTART
from planaria.util.paths import shown

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:       # pathlib is imported by the functions that use it, out of a rank's start
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

#: collectives whose buffer size must agree on every rank: op id = index + 1
OPS = ("Bcast", "Reduce", "Allreduce", "Gather", "Allgather", "Scatter", "Alltoall")
BCAST, REDUCE, ALLREDUCE, GATHER, ALLGATHER, SCATTER, ALLTOALL = range(1, len(OPS) + 1)
MAGIC = 0x314C465F4C50          # "PL_FL1"
SLOTS = 64                      # communicators recorded per rank (later ones are not)
CODES = 64                      # call-site code objects recorded per rank
WORDS = 8                       # 64-bit words per slot
CID_BYTES = 48
CODE_BYTES = 256
_HEAD = 8                       # header words
_SLOT0 = _HEAD
_CIDS = (_HEAD + SLOTS * WORDS) * 8
_CODE0 = _CIDS + SLOTS * CID_BYTES
SIZE = _CODE0 + CODES * CODE_BYTES

_MV: Any = None                 # the file's words (memoryview cast to int64), None when not open
_MAP: mmap.mmap | None = None
_CODE_IDS: dict[int, int] = {}           # id(code object) -> code-table index
_CODE_KEEP: list[Any] = []
_slots_used = 0
_getframe = sys._getframe
_C: Any = None                           # the C note's module while it records, else None
_C_WANT: str | None = None               # the C note wanted: its build's path, "" this interpreter's, None none
NOTE_OFF = "python"                      # PLANARIA_FLIGHT_NOTE's value that keeps the Python note


def path_for(job_dir: str | os.PathLike[str], attempt: int, world_rank: int) -> Path:
    """Where rank ``world_rank``'s record of attempt ``attempt`` (1 first) of a job lives."""
    from pathlib import Path
    return Path(_path_str(job_dir, attempt, world_rank))


def _path_str(job_dir: str | os.PathLike[str], attempt: int, world_rank: int) -> str:
    # os.path in a rank's start: pathlib (and urllib, ipaddress behind it) is not imported there
    return os.path.join(job_dir, "flight", str(attempt), f"{world_rank}.bin")


def open_here() -> bool:
    """Map this rank's record file when running under ``planaria run`` (job directory known);
    False when there is none or it cannot be made (the record is best effort)."""
    if _MV is not None:
        return True
    job = os.environ.get(PLANARIA_JOB_DIR)
    if not job:
        return False
    from mpi4py import MPI              # not at the top: readers of the records are no MPI processes
    rank = MPI.COMM_WORLD.Get_rank()
    attempt = int(os.environ.get(PLANARIA_RESTART, "0") or 0) + 1
    return open_file(_path_str(job, attempt, rank), rank)


def open_file(path: str | os.PathLike[str], world_rank: int) -> bool:
    """Map ``path`` (created or emptied) as this process's record; False when it cannot be made."""
    global _MV, _MAP, _slots_used
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            _MAP = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    _MV = memoryview(_MAP).cast("q")
    _MV[1], _MV[2], _MV[3], _MV[4] = world_rank, SLOTS, CODES, sys.hexversion
    _MV[0] = MAGIC
    _slots_used = 0
    _CODE_IDS.clear()
    _CODE_KEEP.clear()
    _attach_c(os.environ.get(PLANARIA_FLIGHT_NOTE, ""))
    return True


def _attach_c(choice: str) -> None:
    """Write the notes with the C note from now on, or from the first note after numpy's import
    (loading the C note imports numpy, which a rank's start does not: ``_then_c``). ``choice``:
    ``PLANARIA_FLIGHT_NOTE``'s value: ``python`` keeps the Python note, a path names the build to
    load, empty (the default) means this interpreter's build (``note_build``) if there is one. The
    Python note stays where there is none, it is built for another interpreter or it does not load."""
    global note, _C, _C_WANT
    if _C is not None:                   # a record opened before (not closed): its hold goes first
        _C.detach()
    _C, _C_WANT, note = None, None, _py_note
    if choice == NOTE_OFF:
        return
    _C_WANT = choice
    if "numpy" in sys.modules:
        _load_c()
    else:
        note = _then_c


def _load_c() -> None:
    """Load the C note that ``_C_WANT`` names and make it ``note``; the Python note when there is
    none or it does not load."""
    global note, _C
    from importlib.machinery import EXTENSION_SUFFIXES
    note = _py_note
    path = _C_WANT or note_build(build=False)
    if not path or not path.endswith(EXTENSION_SUFFIXES[0]):
        return                           # a build for another interpreter's ABI is never loaded
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_flightnote", path)
        if spec is None or spec.loader is None:
            return
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.attach(_MAP, _code_index, _size_either)
    except (ImportError, OSError, TypeError, ValueError, BufferError):
        return
    _C, note = mod, mod.note


def note_kind() -> str:
    """Which note writes the record now: ``c``, ``python`` (also while the C one waits for numpy),
    or ``none`` when nothing is recorded."""
    return "none" if _MV is None else "c" if _C is not None else "python"


def note_build(build: bool = True) -> str | None:
    """The C note built for this interpreter and numpy (``util.cbuild``; built now when ``build``
    and there is none), or None: no C compiler, no headers, or an interpreter whose frames it does
    not know. A rank asks with its first note: this imports neither numpy nor ``sysconfig``."""
    from importlib.machinery import EXTENSION_SUFFIXES

    from planaria.util import cbuild
    py, npy = _include_dirs()
    if py is None or npy is None:
        return None
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flightnote.c")
    # numpy's configuration header in the checksum: another numpy (another C API) builds anew
    return cbuild.built(src, "flightnote", ("-O2", "-shared", "-fPIC", "-I" + py, "-I" + npy),
                        EXTENSION_SUFFIXES[0], build=build, extra=(os.path.join(npy, "numpy", "_numpyconfig.h"),))


def _include_dirs() -> tuple[str | None, str | None]:
    """The directories of Python's and numpy's C headers (None where there are none)."""
    usual = os.path.join(sys.base_prefix, "include", f"python{sys.version_info[0]}.{sys.version_info[1]}{sys.abiflags}")
    py: str | None = usual
    if not os.path.exists(os.path.join(usual, "Python.h")):     # sysconfig only where the usual place is not it
        import sysconfig
        py = sysconfig.get_paths().get("include")
        if py is None or not os.path.exists(os.path.join(py, "Python.h")):
            py = None
    from importlib.util import find_spec
    spec = find_spec("numpy")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        for sub in ("_core", "core"):                           # numpy 2, numpy 1
            inc = os.path.join(root, sub, "include")
            if os.path.exists(os.path.join(inc, "numpy", "arrayobject.h")):
                return py, inc
    return py, None


def close() -> None:
    """Stop recording (slots handed out before write nowhere); the file stays as it is."""
    global _MV, _MAP, _C, _C_WANT, note
    mv, m, c = _MV, _MAP, _C
    _MV = _MAP = _C = _C_WANT = None
    note = _py_note
    if c is not None:
        c.detach()                       # its hold on the mapping first: a mapping in use cannot close
    if mv is not None:
        mv.release()
    if m is not None:
        m.close()


def slot(cid: str) -> int:
    """A slot for communicator ``cid``: the word index of its first field, 0 when there is none."""
    global _slots_used
    m = _MAP
    if _MV is None or m is None or _slots_used >= SLOTS:
        return 0
    s = _slots_used
    _slots_used += 1
    raw = cid.encode("utf-8")[:CID_BYTES]
    m[_CIDS + s * CID_BYTES:_CIDS + (s + 1) * CID_BYTES] = raw.ljust(CID_BYTES, b"\0")
    return _SLOT0 + s * WORDS


def _py_note(i: int, seq: int, op: int, buf: Any, alt: Any = None, depth: int = 2) -> None:
    """Record in slot ``i`` (the communicator's ``_fl``; 0: none) that its collective number ``seq``
    (its ``_ml_seq``) is ``op`` with ``buf`` (``alt`` when ``buf`` has no size, e.g.
    ``MPI.IN_PLACE``), called from the communicator's method: ``note(self._fl, self._ml_seq, ...)``.
    The call site is kept as code object and instruction offset (``f_lineno`` costs a scan of the
    line table, several hundred ns in a long module; the reader maps the offset to its line).
    ``note`` is this function, or the C one that writes the same words (module docstring);
    ``depth``: frames up to the caller's caller (one more when called through ``_then_c``)."""
    mv = _MV
    if i and mv is not None:
        f = _getframe(depth)
        code = f.f_code
        k = _CODE_IDS.get(id(code))        # by id: a code object's hash is computed anew every time
        if k is None:
            k = _code(code)
        n = getattr(buf, "nbytes", None)
        if n is None:
            n = size(buf) or size(alt)
        mv[i + 1] = op
        mv[i + 2] = n
        mv[i + 3] = k
        mv[i + 4] = f.f_lasti
        mv[i] = seq


note: Callable[..., None] = _py_note       # or the C note, or ``_then_c`` (``_attach_c``)


def _then_c(i: int, seq: int, op: int, buf: Any, alt: Any = None) -> None:
    """``note`` while the C note waits for numpy: this note written in Python, and the C one
    loaded for the next as soon as numpy is imported (by then, mostly, for this call's buffer)."""
    _py_note(i, seq, op, buf, alt, 3)
    if "numpy" in sys.modules and note is _then_c:
        _load_c()


def _size_either(buf: Any, alt: Any) -> int:
    """The bytes of ``buf``, else of ``alt`` (the C note's way to ``size``)."""
    return size(buf) or size(alt)


def _code_index(code: Any) -> int:
    """The code-table index of ``code``, entered now when it has none (the C note's look-up)."""
    k = _CODE_IDS.get(id(code))
    return _code(code) if k is None else k


def _code(code: Any) -> int:
    """The code-table index of ``code`` (1-based; 0 when the table is full)."""
    m = _MAP
    k = len(_CODE_KEEP) + 1
    _CODE_KEEP.append(code)                # keeps its id from being reused
    if k > CODES or m is None:
        _CODE_IDS[id(code)] = 0
        return 0
    raw = f"{shown(code.co_filename)}\0{code.co_name}\0{code.co_firstlineno}".encode("utf-8", "replace")[:CODE_BYTES]
    off = _CODE0 + (k - 1) * CODE_BYTES
    m[off:off + CODE_BYTES] = raw.ljust(CODE_BYTES, b"\0")
    _CODE_IDS[id(code)] = k
    return k


def size(buf: Any) -> int:
    """Bytes a buffer argument describes: a numpy array (or any object with ``nbytes``), bytes,
    or mpi4py's ``[data, count, datatype]`` / ``[data, count]`` spec; 0 when not known (vector
    counts, ``MPI.IN_PLACE``, None)."""
    n = getattr(buf, "nbytes", None)
    if n is None and isinstance(buf, (list, tuple)) and buf:
        data = buf[0]
        count = buf[1] if len(buf) > 1 else None
        if isinstance(count, int):
            dt = buf[2] if len(buf) > 2 else None
            item = getattr(dt, "size", None) if dt is not None else getattr(data, "itemsize", 1)
            n = count * item if isinstance(item, int) else None
        elif not isinstance(count, (list, tuple)):          # [data] or [data, datatype]
            n = getattr(data, "nbytes", None) or (len(data) if isinstance(data, (bytes, bytearray)) else None)
    elif n is None and isinstance(buf, (bytes, bytearray)):
        n = len(buf)
    return int(n) if isinstance(n, int) else 0


# -- reading (the diagnosis) -------------------------------------------------------------
def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The slots of one record file: ``{comm, seq, op, bytes, site}`` each; [] when unreadable.
    The site's line is found only by the Python version that wrote the record (``None`` else)."""
    from pathlib import Path
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    if len(data) < SIZE or struct.unpack_from("<q", data, 0)[0] != MAGIC:
        return []
    same = struct.unpack_from("<q", data, 32)[0] == sys.hexversion
    out = []
    for s in range(SLOTS):
        seq, op, nbytes, k, lasti = struct.unpack_from("<5q", data, (_SLOT0 + s * WORDS) * 8)
        cid = data[_CIDS + s * CID_BYTES:_CIDS + (s + 1) * CID_BYTES].rstrip(b"\0").decode("utf-8", "replace")
        if not cid:
            break
        if seq <= 0 or not 1 <= op <= len(OPS):
            continue
        site = None
        if 1 <= k <= CODES and same:
            raw = data[_CODE0 + (k - 1) * CODE_BYTES:_CODE0 + k * CODE_BYTES].rstrip(b"\0").decode("utf-8", "replace")
            fn, _, rest = raw.partition("\0")
            func, _, first = rest.partition("\0")
            line = _line(fn, func, int(first), lasti) if first.isdigit() else None
            site = f"{fn}:{line} in {func}" if fn and line else None
        out.append({"comm": cid, "seq": seq, "op": OPS[op - 1], "bytes": nbytes, "site": site})
    return out


def _line(path: str, func: str, first: int, lasti: int) -> int | None:
    """The source line of instruction offset ``lasti`` in function ``func`` (defined at line
    ``first``) of the file at ``path``, compiled again here; None when it cannot be found."""
    code = _find(_compiled(path), func, first)
    if code is None:
        return None
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line
    return None


@lru_cache(maxsize=32)
def _compiled(path: str) -> Any:
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        return compile(source, path, "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None


def _find(code: Any, func: str, first: int) -> Any:
    if code is None:
        return None
    if code.co_name == func and (code.co_firstlineno == first or func == "<module>"):
        return code
    for c in code.co_consts:
        if hasattr(c, "co_lines"):
            got = _find(c, func, first)
            if got is not None:
                return got
    return None


def read_dir(job_dir: str | os.PathLike[str], attempt: int | None = None) -> dict[int, list[dict[str, Any]]]:
    """Every rank's record of ``attempt`` (default: the last one that left records): rank -> slots."""
    from pathlib import Path
    base = Path(job_dir) / "flight"
    try:
        attempts = sorted(int(p.name) for p in base.iterdir() if p.name.isdigit())
    except OSError:
        return {}
    if attempt is None:
        attempt = attempts[-1] if attempts else 0
    out: dict[int, list[dict[str, Any]]] = {}
    try:
        files = list((base / str(attempt)).glob("*.bin"))
    except OSError:
        return {}
    for f in files:
        if f.stem.isdigit():
            slots = read(f)
            if slots:
                out[int(f.stem)] = slots
    return out


def size_mismatch(records: dict[int, list[dict[str, Any]]]) -> dict[str, Any] | None:
    """The first collective call (same communicator and number) in which the ranks' buffers
    disagree: ``{comm, seq, op, odd, odd_bytes, others, other_bytes, site}``, where ``odd`` are the
    fewest ranks with one size (on a tie, the larger size: its data overran the others); None
    when every call agrees. Calls where ranks name different operations are left alone (that is
    a collective mismatch of its own, seen by the live diagnosis)."""
    calls: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for rank, slots in records.items():
        for s in slots:
            calls.setdefault((s["comm"], s["seq"]), {})[rank] = s
    for (cid, seq), by_rank in sorted(calls.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if len(by_rank) < 2 or len({s["op"] for s in by_rank.values()}) != 1:
            continue
        sizes: dict[int, list[int]] = {}
        for rank, s in sorted(by_rank.items()):
            if s["bytes"] > 0:
                sizes.setdefault(s["bytes"], []).append(rank)
        if len(sizes) < 2:
            continue
        odd_bytes = min(sizes, key=lambda b: (len(sizes[b]), -b))
        others = sorted(r for b, rs in sizes.items() if b != odd_bytes for r in rs)
        other_sizes = sorted({b for b in sizes if b != odd_bytes})
        odd = sizes[odd_bytes]
        site = next((by_rank[r]["site"] for r in odd if by_rank[r].get("site")), None) or \
            next((s["site"] for s in by_rank.values() if s.get("site")), None)
        return {"comm": cid, "seq": seq, "op": next(iter(by_rank.values()))["op"], "odd": odd,
                "odd_bytes": odd_bytes, "others": others, "other_bytes": other_sizes, "site": site}
    return None


def mismatch_text(odd: str, odd_bytes: int, others: str, other_bytes: list[int], call: str) -> str:
    """The root-cause sentence of a count mismatch (``odd`` and ``others`` are rank ranges)."""
    other = " or ".join(bytes_text(b) for b in other_bytes)
    return (f"passed {bytes_text(odd_bytes)} to {call} where rank(s) {others} passed {other}: "
            f"the counts of one collective call disagree")


def bytes_text(n: int) -> str:
    """``n`` bytes for a reader: 8 B, 8 MiB, 1.5 KiB."""
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            v = n / k
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"
