"""Our own inputs, damaged: a registry entry without its checksums, a reference file truncated, pickled, holding
several arrays or no floats. Each is one line (ReferenceMismatch), never a traceback."""

import io
import json
import pickle

import numpy as np
import pytest

from bench.errors import ReferenceMismatch
from bench.tasks import get_task
from reference.store import load_reference, read_array


@pytest.mark.parametrize("drop", ["npz_sha256", "json_sha256", "fingerprint"])
def test_a_registry_entry_without_a_field_is_one_line(tmp_path, drop):
    from reference.store import PACKAGE_DATA, REGISTRY

    registry = json.loads(REGISTRY.read_text())
    registry["toy-gap"].pop(drop)
    (tmp_path / "registry.json").write_text(json.dumps(registry))
    with pytest.raises(ReferenceMismatch, match=f"registry's entry for toy-gap lacks {drop}"):
        load_reference(get_task("toy-gap"), PACKAGE_DATA, tmp_path / "registry.json")


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.mark.parametrize("content, message", [
    (_npz(probs=np.full((4, 2), 0.5))[:100], "cannot be read as an array"),
    (b"", "cannot be read as an array"),
    (pickle.dumps({"probs": [[0.5, 0.5]]}), "cannot be read as an array"),
    (_npz(probs=np.array([[None, 1]], dtype=object)), "cannot be read as an array"),
    (_npz(a=np.ones((2, 2)), b=np.ones((2, 2))), "holds 2 arrays"),
    (_npz(probs=np.ones((2, 2), dtype=np.int64)), "not finite floats"),
    (_npz(probs=np.array([[np.nan, 1.0]])), "not finite floats"),
    (_npz(probs=np.ones(3)), "not finite floats"),
])
def test_a_damaged_reference_file_is_one_line(tmp_path, content, message):
    path = tmp_path / "reference.npz"
    path.write_bytes(content)
    with pytest.raises(ReferenceMismatch, match=message) as refused:
        read_array(path, "fetch it again")
    assert "\n" not in str(refused.value) and "fetch it again" in str(refused.value)
