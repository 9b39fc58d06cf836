"""Weights in final layout (``kokoro_tvm.packed``): written whole, mapped without a copy, refused
when a byte differs, shared between processes; and the runtime loads a built library from them
with the same audio as transforming the raw weights at load.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from runtime_project import artifacts_copy, runtime_artifacts

from kokoro_tvm import artifacts as A
from kokoro_tvm import packed
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.runtime.synthesizer import KokoroTVM


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        rng.standard_normal((3, 5)).astype(np.float32),
        np.arange(7, dtype=np.int64),
        np.float32(2.5).reshape(()),
        rng.standard_normal((2, 1, 33)).astype(np.float32),
    ]


def test_round_trip_aligned_and_zero_copy(tmp_path):
    import tvm

    arrays = _arrays()
    sha = packed.write(tmp_path / "w.bin", arrays)
    mapped = packed.map_arrays(tmp_path / "w.bin", sha)
    assert [m.dtype for m in mapped] == [a.dtype for a in arrays]
    assert all(np.array_equal(m, a) for m, a in zip(mapped, arrays))
    assert all(m.ctypes.data % packed.ALIGN == 0 for m in mapped)
    tensors = [tvm.runtime.from_dlpack(m) for m in mapped]  # what the runtime binds
    assert [t.data_ptr() for t in tensors] == [m.ctypes.data for m in mapped]  # no copy
    # copy-on-write: a write to the mapping never reaches the file
    mapped[0][0, 0] = 1e9
    assert np.array_equal(packed.map_arrays(tmp_path / "w.bin", sha)[0], arrays[0])
    packed.write(tmp_path / "empty.bin", [])
    assert packed.map_arrays(tmp_path / "empty.bin") == []


def test_a_flipped_byte_a_truncation_and_a_stranger_are_refused(tmp_path):
    path = tmp_path / "w.bin"
    sha = packed.write(path, _arrays())
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(packed.PackedError, match="does not match the sha256"):
        packed.map_arrays(path, sha)
    path.write_bytes(bytes(data[: packed.PAGE + 10]))
    with pytest.raises(packed.PackedError, match="outside the file"):
        packed.map_arrays(path)
    path.write_bytes(b"PK\x03\x04 not ours" * 100)
    with pytest.raises(packed.PackedError, match="not a packed-weights file"):
        packed.map_arrays(path)
    with pytest.raises(packed.PackedError, match="cannot map"):
        packed.map_arrays(tmp_path / "missing.bin")


SHARE = """
import sys, time
from kokoro_tvm import packed
arrays = packed.map_arrays(sys.argv[1])
total = sum(float(a.sum()) for a in arrays)  # touch every page
print("ready", flush=True)
sys.stdin.readline()
"""


def _mapping_kb(pid: int, path: str) -> dict[str, int]:
    """The Rss and Shared_Clean (kB) of ``path``'s mapping in process ``pid``."""
    out: dict[str, int] = {}
    inside = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            key = line.split()[0]
            if not key.endswith(":"):  # a mapping's header: address range, perms, ..., path
                inside = line.rstrip().endswith(path)
            elif inside and key in ("Rss:", "Shared_Clean:", "Pss:"):
                out[key[:-1]] = out.get(key[:-1], 0) + int(line.split()[1])
    return out


def test_two_processes_share_the_mapped_pages(tmp_path):
    """Two processes that map the same file hold its pages once: each one's mapping is shared
    clean pages, and its proportional share (Pss) is about half its Rss."""
    path = tmp_path / "big.bin"
    packed.write(path, [np.ones((1024, 1024), np.float32) * k for k in range(4)])  # 16 MB
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SHARE, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        stats = [_mapping_kb(p.pid, str(path)) for p in procs]
    finally:
        for p in procs:
            p.communicate("\n", timeout=30)
    for s in stats:
        assert s["Rss"] >= 16 * 1024 - 64, stats
        assert s["Shared_Clean"] >= 0.95 * s["Rss"], stats
        assert s["Pss"] <= 0.6 * s["Rss"], stats


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return runtime_artifacts(tmp_path_factory)


def test_the_runtime_maps_packed_weights_and_speaks_as_before(artifacts, tmp_path):
    """Every library of the manifest has its packed weights, the runtime reads no raw weights
    file, and the audio equals the one from transforming the raw weights at load."""
    manifest = json.loads(A.manifest_file(artifacts).read_text())
    assert all("packed" in e for e in manifest["libraries"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tts = KokoroTVM.from_manifest(artifacts)
        audio, _ = tts.create("həlˈO wˈɜɹld", voice="random", is_phonemes=True, seed=3)
        assert tts.libraries._weights == {}  # no component's raw weights were opened
        raw = tmp_path / "raw"
        artifacts_copy(artifacts, raw, ignore=shutil.ignore_patterns("packed"))
        for e in manifest["libraries"]:
            del e["packed"]
        A.manifest_file(raw).write_text(json.dumps(manifest))
        again, _ = KokoroTVM.from_manifest(raw).create(
            "həlˈO wˈɜɹld", voice="random", is_phonemes=True, seed=3
        )
    assert np.array_equal(audio, again)


def test_a_tampered_packed_file_is_refused(artifacts, tmp_path):
    copy = tmp_path / "a"
    artifacts_copy(artifacts, copy, share=("weights",))  # a packed file is edited
    entry = json.loads(A.manifest_file(copy).read_text())["libraries"][0]
    path = copy / entry["packed"]["path"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))
    tts = KokoroTVM.from_manifest(copy)
    with pytest.raises(ArtifactError, match="does not match the sha256"):
        tts.libraries.get(entry["component"], entry["bucket"])
