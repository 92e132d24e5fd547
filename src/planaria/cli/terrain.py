"""``planaria terrain slope|cutdepth``: a terrain kernel over a DEM file in this one process.

The DEM is read and the output written band by band (:func:`planaria.terrain.stream.run_file`),
atomically; the output is in the DEM's float type unless ``--dtype`` says otherwise. Exit status:
0 written, 2 bad input (one line on stderr).
"""
from __future__ import annotations

import json
from collections.abc import Callable

import typer

DTYPES = ("auto", "float32", "float64")
DTYPE_HELP = ("Output type: auto (the DEM's float type: float32 for float32 and integer DEMs, float64 for "
              "float64 ones), float32 or float64.")

app = typer.Typer(name="terrain", help="Terrain analysis in one process (no MPI): slope or cut depth of a DEM file.",
                  no_args_is_help=True, add_completion=False)


def parse_dtype(value: str) -> str | None:
    """The ``--dtype`` value as a dtype name, None for ``auto``; ValueError for anything else."""
    if value not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)} (got {value!r})")
    return None if value == "auto" else value


def _command(kernel: str) -> Callable[..., None]:
    def cmd(
        dem: str = typer.Option(..., "--dem", help="Input DEM (.npy, .npz, GeoTIFF)."),
        out: str = typer.Option(..., "--out", help="Output raster (same formats), written atomically."),
        dtype: str = typer.Option("auto", "--dtype", help=DTYPE_HELP),
        as_json: bool = typer.Option(False, "--json", help="Print the shape, dtype and timings as JSON."),
    ) -> None:
        from planaria.terrain.stream import run_file
        try:
            res = run_file(kernel, dem, out, parse_dtype(dtype))
        except ValueError as exc:
            typer.echo(f"planaria terrain {kernel}: {' '.join(str(exc).split())}", err=True)
            raise typer.Exit(2) from None
        if as_json:
            typer.echo(json.dumps(res))
        else:
            h, w = res["shape"]
            typer.echo(f"{kernel}: {h} x {w} -> {res['out']} ({res['dtype']}) in {res['total_s']:.2f} s "
                       f"(read {res['read_s']:.2f} s, compute {res['compute_s']:.2f} s, write {res['write_s']:.2f} s)")
    cmd.__doc__ = (f"{kernel} of a DEM in one process, read and written in bands of rows (never whole in memory).\n\n"
                   f"Example: planaria terrain {kernel} --dem dem.tif --out {kernel}.tif [--dtype float64]")
    return cmd


app.command("slope")(_command("slope"))
app.command("cutdepth")(_command("cutdepth"))
