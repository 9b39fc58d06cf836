"""Files hashed ahead on a background thread (``runtime.integrity.verify_ahead``): the digest is
taken only for the very file that was hashed, once, and a file written since is hashed again."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.runtime import integrity


def _file(tmp_path, data: bytes = b"weights " * 4096):
    path = tmp_path / "w.bin"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def _settle(path):
    deadline = time.monotonic() + 10
    while not integrity._ahead[str(path.resolve())][1].done():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_digest_hashed_ahead_is_taken_once(tmp_path, monkeypatch):
    path, digest = _file(tmp_path)
    integrity.verify_ahead([path])
    _settle(path)
    calls = []
    monkeypatch.setattr(integrity.artifacts, "sha256", lambda p: calls.append(p) or digest)
    assert integrity.verify_file(path, digest, "the test") == digest
    assert calls == []  # taken from the background hash
    assert integrity.verify_file(path, digest, "the test") == digest
    assert calls == [path]  # control: a second check hashes again


def test_a_file_written_after_it_was_hashed_ahead_is_refused(tmp_path):
    path, digest = _file(tmp_path)
    integrity.verify_ahead([path])
    _settle(path)
    data = bytearray(path.read_bytes())
    data[100] ^= 1  # one flipped bit, same size
    time.sleep(0.01)
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="does not match the sha256 recorded in the test"):
        integrity.verify_file(path, digest, "the test")


def test_a_stale_digest_is_not_trusted_when_mtime_is_put_back(tmp_path):
    path, digest = _file(tmp_path)
    st = os.stat(path)
    integrity.verify_ahead([path])
    _settle(path)
    data = bytearray(path.read_bytes())
    data[7] ^= 0x80
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as hashed; ctime moved
    with pytest.raises(ArtifactError, match="tampered or stale"):
        integrity.verify_file(path, digest, "the test")


def test_missing_files_are_left_to_the_check(tmp_path):
    integrity.verify_ahead([tmp_path / "absent.bin"])
    with pytest.raises(ArtifactError, match="is missing"):
        integrity.verify_file(tmp_path / "absent.bin", "0" * 64, "the test")
