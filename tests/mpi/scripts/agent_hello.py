"""Test job that talks to the controller through planaria.runtime.agent.Agent directly.

usage: agent_hello.py MODE [RANK] [MARKER]
  ok          every rank: hello, a few heartbeats with steps, bye code 0
  kill R      rank R SIGKILLs itself without a report; the others finish with bye 0
  fail R      rank R reports fail (waiting for the ack) then SIGKILLs itself
  code R      rank R says bye with code 3 (then exits 0); the others bye 0
"""
import os
import signal
import sys
import time

from mpi4py import MPI

from planaria.runtime.agent import Agent

mode = sys.argv[1]
target = int(sys.argv[2]) if len(sys.argv) > 2 else -1
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
agent = Agent.from_env(rank, size, role="worker", backend=os.environ.get("PLANARIA_BACKEND", "ulfm"))
assert agent is not None, "PLANARIA_CONTROL_URI not set"
print(f"rank {rank} of {size} pid {os.getpid()}", flush=True)
for step in range(3):
    agent.step = step
    time.sleep(0.4)
if rank == target and mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if rank == target and mode == "fail":
    acked = agent.report("fail", wait=True, timeout=5.0, reason="test failure on purpose")
    print(f"acked={acked}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(0.5)
code = 3 if (rank == target and mode == "code") else 0
agent.report("event", what="done", step=3)
agent.report("bye", wait=True, timeout=5.0, code=code)
agent.close()
print(f"rank {rank} done", flush=True)
os._exit(0)  # MPI_Finalize can hang after a failure
