"""Row partition of a DEM with the N-ABFT redundant rows ([Song 2013], Definition 4, Properties 1-2).

For an M x M window (M odd) an output row r needs input rows r-h .. r+h with
h = (M-1)//2. Definition 4 adds NRow = h + 1 rows below every block: h rows of halo, so the
block's last row sees its full window, plus one extra row, so that worker i also computes
output row r1 (the first row of block i+1). That extra row is the "check result" (Definition 5).
Worker i+1 computes the same row as its own first row, the "checked result" (Definition 6).

Rows are numbered from 0 (north) and intervals are half-open. Worker i owns output rows
[r0, r1). It *computes* rows [r0, r1 + 1) when i < N-1 (``computed``). It reads input rows
[in0, in1) = [r0 - h, r1 + NRow) for a non-last block and [r0 - h, r1 + h) for the last
block, clipped to [0, H). The paper's Property 1 counts only the rows added below:
Row = LocalSizeY + NRow. The top halo of h rows is needed too, and the paper leaves it
implicit (:func:`input_rows` gives the real count).
"""
from __future__ import annotations

from dataclasses import dataclass

from planaria.terrain.window import halo  # h = (M-1)//2 of an M x M window


def nrow(m: int) -> int:
    """Definition 4: redundant rows per block, NRow = (M-1)/2 + 1."""
    return halo(m) + 1


@dataclass(frozen=True)
class Block:
    """One worker's share: output rows [r0, r1), input rows [in0, in1), and the extra check row."""

    rank: int
    r0: int
    r1: int
    in0: int
    in1: int
    check_row: int | None  # == r1 for rank < N-1, None for the last block

    @property
    def local_size(self) -> int:
        """LocalSizeY: the number of rows the block owns."""
        return self.r1 - self.r0

    @property
    def computed(self) -> tuple[int, int]:
        """The output rows the worker computes: owned rows plus the check row."""
        return (self.r0, self.r1 + (0 if self.check_row is None else 1))


def block_sizes(h_rows: int, n: int) -> list[int]:
    """Contiguous block sizes. The first H mod N blocks get one row more."""
    if n < 1:
        raise ValueError("need at least one worker")
    if h_rows < n:
        raise ValueError(f"{h_rows} rows cannot give {n} non-empty blocks")
    q, r = divmod(h_rows, n)
    return [q + (1 if i < r else 0) for i in range(n)]


def partition(h_rows: int, n: int, m: int) -> list[Block]:
    """Split H rows over N workers for an M x M window. Each block is non-empty."""
    h = halo(m)
    blocks: list[Block] = []
    r0 = 0
    sizes = block_sizes(h_rows, n)
    for i, size in enumerate(sizes):
        r1 = r0 + size
        last = i == n - 1
        check = None if last else r1
        below = h if last else h + 1  # rows needed below r1-1 (halo) or below the check row
        blocks.append(Block(i, r0, r1, max(0, r0 - h), min(h_rows, r1 + below), check))
        r0 = r1
    return blocks


def property1_rows(local_size: int, m: int) -> int:
    """Property 1 as the paper states it: Row = LocalSizeY + NRow (rows added below only)."""
    return local_size + nrow(m)


def input_rows(block: Block) -> int:
    """The input rows the block really reads: Property 1's count plus the top halo, clipped at the edges."""
    return block.in1 - block.in0


def verification_shape(n: int, width: int) -> tuple[int, int]:
    """Property 2: V holds 2*(N-1) rows of the full width (TotalSizeX)."""
    return (2 * max(0, n - 1), width)
