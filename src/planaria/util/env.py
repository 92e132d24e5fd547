"""Every ``PLANARIA_*`` environment variable, by name: one constant each, its value its name.

``planaria run`` hands a job's settings to its ranks through these (see ``docs/launcher.md``);
users set the others to tune a run. Code reads and sets them through these constants so that a
name is spelled in one place. The rank recorder (``launch/rankfate.py``) runs with ``python -S -I``
and cannot import planaria: it repeats its two names, checked equal to these by the unit tests.
"""
from __future__ import annotations

PREFIX = "PLANARIA_"        # what every name below starts with (a child's environment is filtered by it)

# ---- set by ``planaria run`` (launch/runner.py) for every rank, read by the rank's runtime
PLANARIA_JOB_DIR = "PLANARIA_JOB_DIR"           # the job directory; runtime, flight record, fragments, demo read it
PLANARIA_CONTROL_URI = "PLANARIA_CONTROL_URI"   # the controller's address; runtime/agent and sparewake connect to it
PLANARIA_SECRET_FILE = "PLANARIA_SECRET_FILE"   # the job secret's file (mode 0600); runtime/agent and nodelink read it
PLANARIA_BACKEND = "PLANARIA_BACKEND"           # ulfm | sim, resolved by the launcher; runtime/bootstrap's world() reads it
PLANARIA_INJECT = "PLANARIA_INJECT"             # the --inject fault plan's spec ("" none); inject.plan reads it
PLANARIA_SPARES = "PLANARIA_SPARES"             # K, the spare processes; runtime/bootstrap and recovery/driver read it
PLANARIA_NRANKS = "PLANARIA_NRANKS"             # N, the working ranks (N+K processes run); for programs, planaria reads none
PLANARIA_T0 = "PLANARIA_T0"                     # the first attempt's launch time, epoch seconds; for programs
PLANARIA_RESTART = "PLANARIA_RESTART"           # the attempt's restart number (0 first); flight record and demo read it
PLANARIA_DETECT = "PLANARIA_DETECT"             # "1": run-time error detection on; runtime/bootstrap reads it
PLANARIA_DETECT_TIMEOUTS = "PLANARIA_DETECT_TIMEOUTS"   # --detect-timeouts thresholds; localize.thresholds parses it
PLANARIA_EVENTS_DEFAULT = "PLANARIA_EVENTS_DEFAULT"     # the default event handler: abort | none; events.local reads it
PLANARIA_NODE_AGENTS = "PLANARIA_NODE_AGENTS"   # "1": ranks reach the controller through their host's node agent (nodelink)
PLANARIA_FATES_DIR = "PLANARIA_FATES_DIR"       # where the rank recorder writes how each rank ended (launch/rankfate.py)
PLANARIA_STDIN = "PLANARIA_STDIN"               # "<rank>:<host>:<fifo>": the rank whose stdin is the launcher's (rankfate)

# ---- set by users (or a wrapping command) to tune a run
PLANARIA_FLIGHT_NOTE = "PLANARIA_FLIGHT_NOTE"   # "python": the flight record's note in Python, not C; or a C build's path; comm.flight reads it
PLANARIA_HOME = "PLANARIA_HOME"                 # the root of jobs/ instead of ./.planaria; launch/jobdir reads, campaign sets
PLANARIA_HOSTS_DIR = "PLANARIA_HOSTS_DIR"       # where `planaria hosts up` keeps host sets; cli/hosts and the runner read
PLANARIA_FINALIZE_TIMEOUT = "PLANARIA_FINALIZE_TIMEOUT"   # seconds MPI_Finalize may take; runtime/bootstrap reads it
PLANARIA_ORPHAN_TIMEOUT = "PLANARIA_ORPHAN_TIMEOUT"       # seconds of controller silence before an agent ends its rank
PLANARIA_EVENTS_CACHE = "PLANARIA_EVENTS_CACHE"  # how many events a process keeps for late handlers; events.local reads it
PLANARIA_JOB_ID = "PLANARIA_JOB_ID"             # a job id from another launcher; the fragments doorbell names its sockets by it
PLANARIA_TERRAIN_KERNELS = "PLANARIA_TERRAIN_KERNELS"   # auto | compiled | numpy: terrain.dispatch reads it

# ---- fragments (paper 003): set by `planaria fragments run` (cli/fragments.py) or users, read by planaria.fragments
PLANARIA_FRAGMENT_THREADS = "PLANARIA_FRAGMENT_THREADS"   # worker threads per rank
PLANARIA_FRAGMENT_TIMEOUT = "PLANARIA_FRAGMENT_TIMEOUT"   # seconds before a run counts as hung
PLANARIA_FRAGMENT_WAKEUPS = "PLANARIA_FRAGMENT_WAKEUPS"   # doorbell | poll: how a rank's loop waits for work
PLANARIA_TERMINATION = "PLANARIA_TERMINATION"             # the termination-detection rule
PLANARIA_TRACE = "PLANARIA_TRACE"                         # "0": no trace
PLANARIA_TRACE_DIR = "PLANARIA_TRACE_DIR"                 # where the per-rank traces go
PLANARIA_TRACE_FLUSH_BYTES = "PLANARIA_TRACE_FLUSH_BYTES"   # the trace writer's buffer size
PLANARIA_BALANCER = "PLANARIA_BALANCER"                   # "1": the §6 balancer on
PLANARIA_JOBS_LEFT_THRESHOLD = "PLANARIA_JOBS_LEFT_THRESHOLD"       # the balancer's jobs-left threshold
PLANARIA_JOBS_DIFFERENCE_RATIO = "PLANARIA_JOBS_DIFFERENCE_RATIO"   # the balancer's jobs-difference ratio
PLANARIA_BALANCER_CAP = "PLANARIA_BALANCER_CAP"           # mean | donor: what a receiver may take
