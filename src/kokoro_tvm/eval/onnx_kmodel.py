"""kokoro-onnx's whole model on ONNX Runtime: the runtime a user picking a CPU runtime runs today.

Two ONNX models of ``KModel.forward_with_tokens`` (token ids, voice row, speed -> audio), for the
end-to-end bench (``e2e.measure_rtf``):

- ``fp32``: this checkpoint exported the way kokoro-onnx's ``scripts/export.py`` does:
  ``KModelForONNX`` around ``KModel(disable_complex=True)`` (``torch.stft``'s complex output has
  no ONNX export, so kokoro-onnx takes kokoro's ``CustomSTFT``), the TorchScript exporter, opset
  17, a dynamic token axis. Same weights, precision and inputs as the runtime's libraries.
- ``int8``: the registry's ``kokoro-v1.0.int8.onnx``, the file kokoro-onnx users download
  (``model.onnx_checkpoint``); only for ``model.config: kokoro-82m``, reported for reference.

Neither takes the decoder's draws (SineGen's ``rand``/``randn`` are random nodes inside the
graph), so their audio cannot equal kokoro's sample for sample; ``agreement`` checks what can be:
fp32's durations (hence its audio length) against kokoro's, and reports the log-mel SNR.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from ..runtime.chunking import join
from ..runtime.planner import Chunk
from .onnx_export import ort_session, quiet_export

OPSET = 17  # kokoro-onnx's scripts/export.py
EXPORT_TOKENS = 50  # the length kokoro-onnx traces at (48 ids + 2 boundary tokens)


def complex_free(km, cfg: dict[str, Any]):
    """``km`` as ``KModel(disable_complex=True)`` builds it: the generator's STFT is kokoro's
    ``CustomSTFT`` (convolutions; no weights, so the loaded ones carry over)."""
    import copy

    from kokoro.custom_stft import CustomSTFT

    n_fft, hop = cfg["istftnet"]["gen_istft_n_fft"], cfg["istftnet"]["gen_istft_hop_size"]
    km = copy.deepcopy(km)
    km.decoder.generator.stft = CustomSTFT(filter_length=n_fft, hop_length=hop, win_length=n_fft)
    return km


def export_kmodel(km, cfg: dict[str, Any]) -> bytes:
    """ONNX bytes of the whole model ``km`` (kokoro's ``KModel``, ``eager.load_kokoro``; left as
    it is: the export runs on a copy)."""
    from kokoro.model import KModelForONNX

    model = KModelForONNX(complex_free(km, cfg)).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.cat(
        [
            torch.zeros(1, 1),
            torch.randint(1, 100, (1, EXPORT_TOKENS - 2), generator=gen),
            torch.zeros(1, 1),
        ],
        dim=1,
    ).long()
    style = torch.randn(1, 2 * cfg["style_dim"], generator=gen)
    speed = torch.ones(1)
    buf = io.BytesIO()
    with quiet_export("the whole model"):
        torch.onnx.export(
            model,
            (ids, style, speed),
            buf,
            dynamo=False,
            opset_version=OPSET,
            input_names=["input_ids", "style", "speed"],
            output_names=["waveform", "duration"],
            dynamic_axes={
                "input_ids": {1: "input_ids_len"},
                "waveform": {0: "num_samples"},
                "duration": {0: "input_ids_len"},
            },
        )
    return buf.getvalue()


def sessions(files: dict[str, bytes], threads: int) -> dict[str, Any]:
    """An ORT session per model by name (``fp32``: ``export_kmodel``; ``int8``: the registry's
    file), with the bench's thread count."""
    return {name: ort_session(model, threads) for name, model in files.items()}


def run(session, chunk: Chunk, speed: float = 1.0) -> tuple[np.ndarray, np.ndarray | None]:
    """Audio (and durations, if the model returns them) of one chunk: inputs by position (ids
    [1, T], voice row [1, 256], speed [1]), as both exports name them differently."""
    ids, style, rate = (i.name for i in session.get_inputs())
    out = session.run(
        None,
        {
            ids: chunk.input_ids[None].astype(np.int64),
            style: chunk.style.astype(np.float32),
            rate: np.array([speed], np.float32),
        },
    )
    return out[0].reshape(-1), (out[1].reshape(-1) if len(out) > 1 else None)


def agreement(
    session, chunks: list[Chunk], reference: np.ndarray, speed: float = 1.0
) -> dict[str, Any]:
    """One run on the runtime's chunks against kokoro's float32 audio of them (``reference``):
    tokens whose duration differs (``None`` without durations), and log-mel SNR when the lengths
    match (reported, not judged: the draws differ, and so does CustomSTFT's edge padding)."""
    from .metrics import log_mel_snr

    runs = [run(session, c, speed) for c in chunks]
    audio = join([a for a, _ in runs])
    differ = (
        None
        if runs[0][1] is None
        else int(sum(int((d != c.durations).sum()) for (_, d), c in zip(runs, chunks)))
    )
    snr = round(log_mel_snr(reference, audio), 2) if audio.shape == reference.shape else None
    return {"durations_differ": differ, "samples": int(audio.size), "log_mel_snr_db": snr}
