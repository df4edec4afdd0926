"""What a reference is and how its files are read, whoever ships them: the embedded references of the registry
(:mod:`reference.store`) and the competition's official ones (:mod:`reference.official`)."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.errors import ReferenceMismatch


@dataclass(frozen=True)
class Reference:
    """``array`` is ``probs`` ``(N_test, C)`` or ``samples`` ``(N_test, S)``; ``sha256`` is the npz's."""

    task: str
    key: str
    array: np.ndarray
    metadata: dict
    sha256: str

    @property
    def noise_floor(self) -> dict:
        return self.metadata["noise_floor"]

    @property
    def noise_floor_spread(self) -> dict | None:
        """How far an exact run may score from each floor (:func:`reference.evidence.floor_spread`); None where the
        reference publishes none (official references, or metadata written before it was)."""
        return self.metadata.get("noise_floor_spread")


def checked_entry(entry, fields: tuple[str, ...], where: str, advice: str) -> dict:
    """``entry`` (a registry's or a manifest's record) if it is a dict holding every field of ``fields`` as text,
    else one :class:`ReferenceMismatch` line naming what is missing."""
    missing = [name for name in fields if not isinstance(entry, dict) or not isinstance(entry.get(name), str)]
    if missing:
        raise ReferenceMismatch(f"reference damaged: {where} lacks {', '.join(missing)}; {advice}")
    return entry


def read_array(path: Path, advice: str) -> tuple[str, np.ndarray]:
    """The one finite floating-point array of a reference ``.npz`` (or ``.npy``) and its key; anything else (a
    truncated or pickled file, several arrays, integers, NaN) is one :class:`ReferenceMismatch` line."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):  # a .npy file
            key, array = "array", loaded
        else:
            with loaded:
                if len(loaded.files) != 1:
                    raise ReferenceMismatch(f"reference damaged: {path} holds {len(loaded.files)} arrays, not one; "
                                            f"{advice}")
                key = loaded.files[0]
                array = loaded[key]
    except ReferenceMismatch:
        raise
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as error:
        raise ReferenceMismatch(f"reference damaged: {path} cannot be read as an array ({type(error).__name__}: "
                                f"{' '.join(str(error).split())[:200]}); {advice}") from None
    if array.dtype.kind != "f" or array.ndim != 2 or not np.isfinite(array).all():
        raise ReferenceMismatch(f"reference damaged: {path} holds a {array.dtype} array of shape {array.shape}, "
                                f"not finite floats (test points x columns); {advice}")
    return key, array
