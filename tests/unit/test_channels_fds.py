"""The controller's channel server out of descriptors: it neither spins nor dies, and accepts the
waiting agents once descriptors are free again (real Unix sockets, a server process with a low
open-file limit)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from planaria.events.channel import frame

SERVER = textwrap.dedent("""
    import json, os, resource, sys, time
    from planaria.launch.channels import ChannelServer
    path, spare, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    srv = ChannelServer(path)
    used = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + spare, used + spare))
    print("ready", flush=True)
    seen, most, end = set(), 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for peer, frames, why in srv.ready():
            seen.update(f.decode() for f in frames)
        most = max(most, len(srv.peers))
        time.sleep(0.01)
    t = os.times()
    print(json.dumps({"seen": sorted(seen), "exhausted": srv.exhausted, "most": most,
                      "cpu": t.user + t.system, "error": srv.last_error}), flush=True)
""")


def test_out_of_descriptors_the_server_waits_and_then_accepts_everyone(tmp_path: Path) -> None:
    path = str(tmp_path / "chan.sock")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, path, "4", "4"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        clients = []
        for i in range(12):                   # 3x what the server can hold: the rest wait in the backlog
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            c.sendall(frame(f"agent-{i}".encode()))
            clients.append(c)
        time.sleep(1.5)
        for c in clients[:8]:                 # agents that end free the server's descriptors
            c.close()
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        for c in clients:
            c.close()
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seen"] == sorted(f"agent-{i}" for i in range(12))     # every waiting agent was read
    assert res["exhausted"] >= 1 and res["most"] <= 5, res        # 4 spare (+1: listdir's own counted)
    assert "Too many open files" in res["error"]
    assert res["cpu"] < 1.5, f"the server spun while out of descriptors: {res['cpu']:.2f} s CPU in 4 s"


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    """In a child with soft 64 and hard 4096: the launcher's call leaves it at 4096."""
    prog = ("import resource\nfrom planaria.launch.fdlimit import raise_open_files\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 4096))\nprint(*raise_open_files())\n")
    before, now = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60,
                                 check=True).stdout.split()
    assert (int(before), int(now)) == (64, 4096)
