"""Downloads against a local server: each case ends in a verified file or a clear error, never a corrupt file."""

import errno
import hashlib
import os

import pytest

from bench import download as dl
from bench.download import FetchError, TrustStore, download

DATA = bytes(range(256)) * 4000  # 1 MB: several read chunks? no, one; the cut tests cut inside it
PATH = "files/data.bin"


@pytest.fixture(autouse=True)
def no_retry_pause(monkeypatch):
    monkeypatch.setattr(dl, "RETRY_PAUSE_SECONDS", 0.0)


@pytest.fixture
def served(file_server):
    file_server.files[PATH] = DATA
    return file_server


def fetch(server, tmp_path, expected=None, retries=0):
    target = tmp_path / "cache" / "downloads" / "data.bin"
    return target, download(server.url + PATH, target, expected, TrustStore(tmp_path / "cache"), "key",
                            retries=retries)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def leftovers(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache" / "downloads").glob("*"))


def test_clean_download_with_official_checksum(served, tmp_path):
    target, got = fetch(served, tmp_path, expected=sha(DATA))
    assert target.read_bytes() == DATA and got.trust == "official" and got.sha256 == sha(DATA)
    assert leftovers(tmp_path) == ["data.bin"]
    assert TrustStore(tmp_path / "cache").read() == {}, "an official checksum is not recorded as first use"


def test_first_download_is_unconfirmed_until_recorded_and_later_ones_must_match(served, tmp_path):
    target, got = fetch(served, tmp_path)
    assert got.trust == "first use" and got.unconfirmed
    assert TrustStore(tmp_path / "cache").read() == {}, "download records nothing: the fetch does, after conversion"
    TrustStore(tmp_path / "cache").record_all({"key": got.sha256})
    assert TrustStore(tmp_path / "cache").read()["key"]["sha256"] == sha(DATA)
    assert not fetch(served, tmp_path)[1].unconfirmed, "the file is re-verified against its record"
    target.unlink()
    served.files[PATH] = DATA[:-1] + b"x"  # the file changed upstream (or a mirror serves another one)
    with pytest.raises(FetchError, match="recorded at first download"):
        fetch(served, tmp_path)
    assert leftovers(tmp_path) == []


def test_interrupted_download_keeps_its_part_and_resumes_with_a_range_request(served, tmp_path):
    served.faults[PATH] = [("cut", 300_000)]
    with pytest.raises(FetchError, match="300000 bytes received are kept .* resumes"):
        fetch(served, tmp_path, expected=sha(DATA))
    assert leftovers(tmp_path) == ["data.bin.part"], "a partial file never takes the final name"
    target, got = fetch(served, tmp_path, expected=sha(DATA))
    assert target.read_bytes() == DATA
    assert served.ranges(PATH) == [None, "bytes=300000-"]
    assert leftovers(tmp_path) == ["data.bin"]


def test_retries_resume_within_one_fetch(served, tmp_path):
    served.faults[PATH] = [("cut", 100_000), ("cut", 200_000)]
    target, _ = fetch(served, tmp_path, expected=sha(DATA), retries=2)
    assert target.read_bytes() == DATA
    assert served.ranges(PATH) == [None, "bytes=100000-", "bytes=300000-"]


def test_server_that_ignores_ranges_sends_the_whole_file_again(served, tmp_path):
    served.faults[PATH] = [("cut", 100_000), "no-range"]
    target, _ = fetch(served, tmp_path, expected=sha(DATA), retries=1)
    assert target.read_bytes() == DATA


def test_checksum_mismatch_deletes_the_file(served, tmp_path):
    with pytest.raises(FetchError, match="does not match the official checksum .* deleted"):
        fetch(served, tmp_path, expected=sha(b"something else"))
    assert leftovers(tmp_path) == []


def test_corrupted_existing_file_is_refused_and_removed(served, tmp_path):
    target, _ = fetch(served, tmp_path, expected=sha(DATA))
    target.write_bytes(DATA[:1000])  # e.g. truncated on disk later
    with pytest.raises(FetchError, match="does not match"):
        fetch(served, tmp_path, expected=sha(DATA))
    assert not target.exists()


def test_truncated_transfers_end_in_an_error_not_a_file(served, tmp_path):
    served.faults[PATH] = [("cut", 10)] * 5
    with pytest.raises(FetchError, match="after 2 attempts"):
        fetch(served, tmp_path, expected=None, retries=1)
    assert leftovers(tmp_path) == ["data.bin.part"]
    assert TrustStore(tmp_path / "cache").read() == {}, "nothing is trusted from an incomplete transfer"


def test_server_errors(served, tmp_path):
    served.faults[PATH] = ["500", "500"]
    with pytest.raises(FetchError, match="500 .*after 2 attempts"):
        fetch(served, tmp_path, retries=1)
    served.faults[PATH] = ["500"]
    target, _ = fetch(served, tmp_path, retries=1)  # a passing server error is retried
    assert target.read_bytes() == DATA
    target.unlink()
    with pytest.raises(FetchError, match="404"):
        download(served.url + "missing.bin", target, None, TrustStore(tmp_path / "cache"), "other")
    assert not target.exists()


def test_cache_that_is_a_file_is_a_clear_error(served, tmp_path):
    (tmp_path / "cache").write_text("not a folder")
    with pytest.raises(FetchError, match="cannot write to the cache folder"):
        fetch(served, tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_cache_is_a_clear_error(served, tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache").chmod(0o500)
    try:
        with pytest.raises(FetchError, match="cannot write to the cache folder"):
            fetch(served, tmp_path)
    finally:
        (tmp_path / "cache").chmod(0o700)


def test_permission_denied_while_writing_is_a_clear_error(served, tmp_path, monkeypatch):
    real_open = open

    def denied(path, mode="r", *args, **kwargs):
        if str(path).endswith(".part"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", denied)
    with pytest.raises(FetchError, match="cannot write to the cache folder .*Permission denied"):
        fetch(served, tmp_path)


def test_not_enough_space_is_refused_before_writing(served, tmp_path, monkeypatch):
    monkeypatch.setattr(dl.shutil, "disk_usage", lambda _path: type("Usage", (), {"free": 1000})())
    with pytest.raises(FetchError, match="needs .* GiB but only .* free"):
        fetch(served, tmp_path)
    assert leftovers(tmp_path) == []


def test_disk_full_during_the_transfer_is_a_clear_error(served, tmp_path, monkeypatch):
    real_open = open

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, _chunk):
            raise OSError(errno.ENOSPC, "No space left on device")

    def opener(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        return FullDisk(f) if str(path).endswith(".part") else f

    monkeypatch.setattr("builtins.open", opener)
    with pytest.raises(FetchError, match="no space left"):
        fetch(served, tmp_path)
    assert "data.bin" not in leftovers(tmp_path)
