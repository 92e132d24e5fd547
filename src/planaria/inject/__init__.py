"""Fault injection: the plan language and the per-rank injector.

>>> from planaria import inject
>>> plan = inject.kill(rank=2, iteration=50) + inject.Plan.parse("drop:src=0,dst=1,p=0.1,seed=3")
>>> plan.to_spec()
'kill:rank=2,iter=50;drop:src=0,dst=1,p=0.1,seed=3'
"""
from .injector import Injector
from .plan import (
    ENV_VAR,
    BitFlip,
    Delay,
    Drop,
    Fault,
    Hang,
    IOErrorFault,
    Kill,
    KillEvent,
    Plan,
    PlanError,
    RandomKill,
    RankSet,
    bitflip,
    delay,
    derive_seed,
    drop,
    hang,
    ioerror,
    kill,
    random_kill,
)

__all__ = [
    "ENV_VAR",
    "BitFlip",
    "Delay",
    "Drop",
    "Fault",
    "Hang",
    "IOErrorFault",
    "Injector",
    "Kill",
    "KillEvent",
    "Plan",
    "PlanError",
    "RandomKill",
    "RankSet",
    "bitflip",
    "delay",
    "derive_seed",
    "drop",
    "hang",
    "ioerror",
    "kill",
    "random_kill",
]
