"""Names of the N-ABFT fault kinds and run modes, shared by the runtime and the CLI.

Kept apart from :mod:`planaria.abft.masterworker` (numpy, MPI) so that ``planaria`` starts without them.
"""
from __future__ import annotations

#: faults a worker can be given (``--force KIND:WORKER``, WORKER an index 0..N-1, or drawn at ``--error-rate``)
KINDS = ("crash", "silent", "nodata", "readerror", "memory")
#: ``abft``: redundant rows and verification; ``plain``: neither; ``duplicate``: every block twice
MODES = ("abft", "plain", "duplicate")
