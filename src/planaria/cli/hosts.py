"""`planaria hosts up|down|status`: two test hosts on one machine (network namespaces).

The hosts stay up between commands; their state (agent script, addresses) is
kept in ``$PLANARIA_HOSTS_DIR`` (default ``/run/planaria-hosts``)/<first name>.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from planaria.launch import netns
from planaria.util.env import PLANARIA_HOSTS_DIR

app = typer.Typer(
    name="hosts",
    help="Create, remove or show two test hosts (network namespaces joined by a veth pair) "
         "for trying multi-host MPI jobs on one machine. Needs root.",
    no_args_is_help=True,
    add_completion=False,
)

_NAMES_HELP = "The two host names, comma-separated."
# the options every command here takes
_NAMES_OPTION = typer.Option(",".join(netns.DEFAULT_NAMES), "--names", help=_NAMES_HELP)
_JSON_OPTION = typer.Option(False, "--json", help="Print JSON.")


def _state_root() -> Path:
    return Path(os.environ.get(PLANARIA_HOSTS_DIR, "/run/planaria-hosts"))


def _parse_names(names: str) -> tuple[str, str]:
    parts = [p.strip() for p in names.split(",") if p.strip()]
    if len(parts) != 2:
        raise typer.BadParameter(f"need exactly two names, got {names!r}", param_hint="--names")
    return parts[0], parts[1]


def _found(names: str) -> tuple[tuple[str, str], netns.HostSet | None, set[str]]:
    """The two names of ``--names``, their saved host set (None: none saved) and the network
    namespaces present."""
    pair = _parse_names(names)
    return pair, _load(pair), set(netns.list_namespaces())


def _load(names: tuple[str, str]) -> netns.HostSet | None:
    try:
        return netns.load_hosts(_state_root() / names[0])
    except (netns.HostSetError, ValueError, KeyError, OSError):
        return None


def _describe(hs: netns.HostSet, slots: int = 2) -> dict:
    mpiexec = str(Path(hs.bindir) / "mpiexec")
    argv = [*hs.launch_prefix, mpiexec, *hs.mpiexec_args(slots),
            "-n", str(slots * len(hs.names)), sys.executable, "app.py"]
    return {
        **hs.to_dict(),
        "up": hs.exists(),
        "mpiexec_args": hs.mpiexec_args(slots),
        "example": shlex.join(argv),
    }


def _fail(msg: str, as_json: bool, code: int = 1) -> None:
    if as_json:
        typer.echo(json.dumps({"ok": False, "error": msg}))
    else:
        typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


@app.command("up")
def up(
    names: str = _NAMES_OPTION,
    subnet: str = typer.Option(netns.DEFAULT_SUBNET, "--subnet", help="Private IPv4 subnet for the link."),
    slots: int = typer.Option(2, "--slots", min=1, help="Ranks per host in the printed example."),
    replace: bool = typer.Option(False, "--replace", help="Recreate hosts that already exist."),
    as_json: bool = _JSON_OPTION,
) -> None:
    """Create the two hosts and print how to launch mpiexec over them."""
    pair = _parse_names(names)
    ok, reason = netns.available()
    if not ok:
        _fail(f"cannot create network namespaces here: {reason}", as_json)
    old = _load(pair)
    if old is not None and old.exists() and not replace:
        info = _describe(old, slots)
        if as_json:
            typer.echo(json.dumps({"ok": True, "created": False, **info}))
        else:
            typer.echo(f"hosts {', '.join(pair)} are already up (use --replace to recreate)")
            typer.echo(info["example"])
        return
    if old is not None:
        old.destroy()
    try:
        hs = netns.create_hosts(pair, subnet, workdir=_state_root() / pair[0], replace=replace)
    except (netns.HostSetError, ValueError) as exc:
        _fail(str(exc), as_json)
    info = _describe(hs, slots)
    if as_json:
        typer.echo(json.dumps({"ok": True, "created": True, **info}))
        return
    for n in hs.names:
        typer.echo(f"{n}\t{hs.addresses[n]}\t(netns {n})")
    typer.echo(f"ssh agent: {hs.agent_path}")
    typer.echo("run a job over both hosts (as root also set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1):")
    typer.echo(info["example"])


@app.command("down")
def down(
    names: str = _NAMES_OPTION,
    as_json: bool = _JSON_OPTION,
) -> None:
    """Remove the two hosts (kills whatever still runs inside them)."""
    pair, hs, present = _found(names)
    removed = [n for n in pair if n in present]
    if hs is not None:
        hs.destroy()
    for n in pair:  # also without state, e.g. after the state dir was lost
        netns.remove_host(n)
    if as_json:
        typer.echo(json.dumps({"ok": True, "removed": removed}))
    else:
        typer.echo(f"removed: {', '.join(removed)}" if removed else "nothing to remove")


@app.command("status")
def status(
    names: str = _NAMES_OPTION,
    as_json: bool = _JSON_OPTION,
) -> None:
    """Show whether the hosts are up, their addresses and the mpiexec arguments."""
    pair, hs, present = _found(names)
    ok, reason = netns.available() if not (present & set(pair)) else (True, "ok")
    info: dict[str, Any]
    if hs is None:
        info = {"names": list(pair), "up": all(n in present for n in pair),
                "namespaces": {n: n in present for n in pair}, "state": None,
                "available": ok, "reason": reason}
    else:
        info = {**_describe(hs), "namespaces": {n: n in present for n in pair},
                "state": str(hs.workdir / netns.STATE_NAME), "available": ok, "reason": reason}
    if as_json:
        typer.echo(json.dumps(info))
        return
    if not info["up"]:
        typer.echo(f"hosts {', '.join(pair)} are down" + ("" if ok else f" (unavailable here: {reason})"))
        if any(info["namespaces"].values()):
            typer.echo(f"partly present: {info['namespaces']}; run 'planaria hosts down' to clean up")
        return
    typer.echo(f"hosts {', '.join(pair)} are up")
    if hs is not None:
        for n in hs.names:
            typer.echo(f"{n}\t{hs.addresses[n]}")
        typer.echo(info["example"])
