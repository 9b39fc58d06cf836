"""Host arrays into TVM tensors: aligned inputs handed over as they are, others copied, and the
decoder's noise drawn where the library reads it, with the same audio either way."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_project import runtime_artifacts

from kokoro_tvm.packed import ALIGN
from kokoro_tvm.runtime import component, transfer, tvm_runtime
from kokoro_tvm.runtime.synthesizer import KokoroTVM


def _data(t) -> int:
    return np.from_dlpack(t).ctypes.data


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
@pytest.mark.parametrize("shape", [(1,), (7, 13), (1, 601, 9)])
def test_aligned_empty_is_aligned_and_sized(dtype, shape):
    a = transfer.aligned_empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % ALIGN == 0


def test_an_aligned_input_is_shared_and_an_unaligned_one_copied():
    dev = tvm_runtime.cpu()
    a = transfer.aligned_empty((3, 1001), np.float32)
    a[...] = np.arange(a.size, dtype=np.float32).reshape(a.shape)
    t = transfer.to_device(a, dev)
    assert _data(t) == a.ctypes.data
    np.testing.assert_array_equal(transfer.to_host(t), a)

    raw = transfer.aligned_empty((3 * 1001 + 1,), np.float32)
    b = raw[1:].reshape(3, 1001)  # 4 bytes past the alignment
    b[...] = a
    u = transfer.to_device(b, dev)
    assert _data(u) != b.ctypes.data and _data(u) % ALIGN == 0
    b += 1  # the copy is the tensor's own
    np.testing.assert_array_equal(transfer.to_host(u), a)

    ro = a.copy()
    ro.flags.writeable = False  # numpy's DLPack cannot export a read-only array: copied
    np.testing.assert_array_equal(transfer.to_host(transfer.to_device(ro, dev)), a)


@pytest.fixture(scope="module")
def tts(tmp_path_factory) -> KokoroTVM:
    return KokoroTVM.from_manifest(runtime_artifacts(tmp_path_factory))


def test_the_decoder_reads_its_noise_where_it_was_drawn(tts, monkeypatch):
    phonemes = "həlˈO wˈɜɹ"
    (harmonics,) = {
        lib.input("rand_ini").shape[1]
        for lib in tts.manifest.of_target(tts.target)
        if lib.component == "decoder"
    }
    shared: dict[bool, list[bool]] = {False: [], True: []}  # copy -> each noise input shared
    copy = False

    def spy(x, dev):
        if copy:  # read-only: what to_device cannot hand over, so it copies
            x = x.view()
            x.flags.writeable = False
        t = transfer.to_device(x, dev)
        if x.ndim >= 3 and x.shape[-1] == harmonics:  # [1, (frames,) samples, harmonics]
            shared[copy].append(_data(t) == x.ctypes.data)
        return t

    monkeypatch.setattr(component, "to_device", spy)
    zero_copy = tts.synthesize(phonemes, "random", seed=3).audio
    copy = True
    copied = tts.synthesize(phonemes, "random", seed=3).audio
    assert shared[False] and all(shared[False]), shared
    assert shared[True] and not any(shared[True]), shared
    np.testing.assert_array_equal(zero_copy, copied)
