"""Picture of a demo run: the rod's temperature profile, and the step counter over time with failures."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from planaria.util.fsutil import atomic_write
from planaria.util.plotting import INSTALL_HINT, matplotlib_missing, pyplot


__all__ = ["INSTALL_HINT", "matplotlib_missing", "plot_report"]


def plot_report(report: dict[str, Any], path: str | Path) -> Path:
    """Write a two-panel PNG for a finished ``planaria demo`` report; returns the path.
    RuntimeError (one line, naming the fix) without matplotlib."""
    plt = pyplot()

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), constrained_layout=True)
    prof = report["profile"]
    top.plot(prof["x"], prof["initial"], lw=0.5, color="0.7", label="initial")
    top.plot(prof["x"], prof["final"], lw=0.8, color="tab:red", label=f"after {report['steps']} steps")
    top.set_xlabel("position along the rod")
    top.set_ylabel("temperature")
    top.set_title("temperature profile (sampled)"
                  + (" — equals the failure-free serial run bit for bit" if report["bit_identical"] else ""))
    top.legend(loc="upper right")

    t0 = report["t_start"]
    tl = report.get("timeline") or []
    if tl:
        bottom.plot([t - t0 for t, _ in tl], [s for _, s in tl], ".", ms=2, color="tab:blue", label="step reached")
    for k in report.get("kills", []):
        bottom.axvline(k["t"] - t0, color="tab:red", ls="--", lw=1)
        bottom.text(k["t"] - t0, 0, f" kill rank {k['rank']}", color="tab:red", rotation=90, va="bottom")
    for ev in report.get("failures", []):
        start = ev["t_detect"] - t0
        bottom.axvspan(start, start + ev["total_s"], color="tab:orange", alpha=0.3)
        bottom.text(start, ev["version"], f" resume from {ev['version']}", fontsize=8)
    bottom.set_xlabel("seconds since start")
    bottom.set_ylabel("time step")
    bottom.set_title("progress, failures (dashed) and recoveries (shaded)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)       # PNG whatever the name ends with
    plt.close(fig)
    return atomic_write(path, buf.getvalue())     # an existing plot is replaced whole or not at all
