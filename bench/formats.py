"""The competition's file formats: numpy ``savetxt`` text matrices and ``.npz`` archives.

Text files (``%.18e``, one space between values, one row per example, no header) are read in
chunks of rows, so a 2 GiB file never needs more memory than one chunk plus its converted output,
and are converted once into ``.npy`` files that later runs memory-map.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from bench.errors import BenchError

ROWS_PER_CHUNK = 2048


class FormatError(BenchError):
    """A file that is not in the format it should be (ragged rows, text that is not numbers, wrong shape)."""


def count_rows(path: Path) -> int:
    """Lines of a text file (a last line without a newline counts too)."""
    rows = 0
    last = b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            rows += block.count(b"\n")
            last = block[-1:]
    return rows + (last != b"\n")


def read_text_chunks(path: Path, rows_per_chunk: int = ROWS_PER_CHUNK) -> Iterator[np.ndarray]:
    """Yields float64 chunks ``(rows, columns)`` of a savetxt matrix; every row must have the same width."""
    width = None
    with open(path, "r") as f:
        while True:
            lines = [line for line in (f.readline() for _ in range(rows_per_chunk)) if line.strip()]
            if not lines:
                return
            try:
                chunk = np.loadtxt(lines, dtype=np.float64, ndmin=2)
            except ValueError as error:
                raise FormatError(f"{path.name}: not a whitespace-separated numeric matrix ({error})") from None
            if width is None:
                width = chunk.shape[1]
            elif chunk.shape[1] != width:
                raise FormatError(f"{path.name}: rows of {chunk.shape[1]} values after rows of {width}")
            yield chunk


def read_text_matrix(path: Path) -> np.ndarray:
    """A whole savetxt matrix ``(rows, columns)`` as float64 (for files of a few MiB: references)."""
    chunks = list(read_text_chunks(path))
    if not chunks:
        raise FormatError(f"{path.name}: the file holds no rows")
    return np.concatenate(chunks)


def text_to_npy(path: Path, out: Path, convert: Callable[[np.ndarray], np.ndarray]) -> tuple[int, ...]:
    """Converts a savetxt matrix row-chunk by row-chunk into ``out`` (``.npy``); returns its shape.

    ``convert`` maps a float64 chunk ``(rows, columns)`` to the stored rows ``(rows, *shape)``.
    """
    n_rows = count_rows(path)
    if n_rows == 0:
        raise FormatError(f"{path.name}: the file holds no rows")
    array = None
    start = 0
    for chunk in read_text_chunks(path):
        rows = convert(chunk)
        if array is None:
            array = np.lib.format.open_memmap(out, mode="w+", dtype=rows.dtype, shape=(n_rows, *rows.shape[1:]))
        array[start:start + len(rows)] = rows
        start += len(rows)
    array.flush()
    del array
    if start != n_rows:
        raise FormatError(f"{path.name}: {n_rows} lines but {start} rows of numbers (blank lines inside?)")
    return (n_rows, *rows.shape[1:])


def npz_array(path: Path, key: str) -> np.ndarray:
    """One array of an ``.npz`` archive (refusing pickled objects)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            if key not in archive.files:
                raise FormatError(f"{path.name}: no array {key!r} (it holds {', '.join(archive.files)})")
            return archive[key]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise FormatError(f"{path.name}: not a readable .npz archive ({error})") from None

