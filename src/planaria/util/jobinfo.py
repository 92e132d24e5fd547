"""What the MPI launcher tells every rank of a job alike (read from its environment, no messages)."""
from __future__ import annotations

import functools
import hashlib
import os

from planaria.util.env import PLANARIA_JOB_ID


def job_namespace() -> str | None:
    """A name the launcher gives every rank of one job alike (PMIx namespace, else a job id); None without one."""
    for k in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME", PLANARIA_JOB_ID):
        v = os.environ.get(k)
        if v:
            return v
    return None


def all_on_this_host(size: int) -> bool:
    """True when the launcher says every rank of the job (at least ``size``) shares this host."""
    local = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("MPI_LOCALNRANKS")
    world = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE")
    try:
        return local is not None and world is not None and int(local) == int(world) >= size
    except ValueError:
        return False


@functools.lru_cache(maxsize=4)
def job_key(namespace: str) -> str:
    """A short name for the job ``namespace`` that fits in a socket name (20 hex digits of its SHA-1)."""
    return hashlib.sha1(namespace.encode()).hexdigest()[:20]
