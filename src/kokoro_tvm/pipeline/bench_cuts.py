"""Stage ``bench_cuts``: what the runtime's cuts cost a listener (``eval.cuts``), on the libraries
this CPU runs, each way spoken as its users reach it.

Random weights make no speech, whose pitch or words could be measured: on such a build (the
tests' tiny one) the stage writes why it measured nothing.

The reference is ``create()`` (kokoro's own chunks: whole sentences, a short paragraph one
utterance); the floor is ``create()`` with another seed. Then ``kokoro-tvm synth --stream`` (the
CLI itself, in this process, writing a float WAV) and the server's requests (``Engine.open``, the
call the HTTP layer makes for a request, on a request parsed as the server parses it), each with
its default cuts and with ``--cuts fast``, and the first chunk ending at its first clause mark,
the candidate the default was measured against. DVC metrics: per way, the means over the texts,
each against its bound, and every text's row; with the CPU, its ISA and the load average.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts
from ..atomic import write_json
from ..cpuinfo import load_average, this_cpu
from ..eval import cuts
from ..params import Params
from ..runtime import cli
from ..runtime.manifest import explain_pick, read_manifest
from ..runtime.options import PROFILES, Cuts
from ..runtime.synthesizer import KokoroTVM
from ..runtime.wav import read_wav
from ..server.engine import Engine, ServerConfig
from ..server.schema import speech_request

VOICE = "af_heart"  # the voice Kokoro-FastAPI and the chat front ends default to
#: the candidate for the default that the numbers ruled on: the first chunk ends at the first
#: clause mark, the pauses at that cut shortened as ``fast`` shortens them
FIRST_CLAUSE = Cuts("first-clause", first="clause", cut_pauses=1, lead_in=2)


def run(_: Params, root: Path = artifacts.ROOT, log: Callable[[str], None] = print) -> dict:
    """Measure every way on ``eval.cuts.TEXTS`` and write the metrics."""
    root = Path(root).resolve()
    manifest = read_manifest(root)
    target, why = explain_pick(manifest)
    if manifest.model.random:
        # pitch, pauses and words are properties of speech: random weights make none
        doc = {"target": target, "skipped": "random weights: no speech to measure cuts on"}
        write_json(artifacts.bench_cuts_file(root), doc)
        log(f"bench_cuts: {doc['skipped']}")
        return doc
    voice = VOICE
    load_before = load_average()
    tts = KokoroTVM.from_manifest(root)
    with tempfile.TemporaryDirectory(prefix="bench-cuts-") as tmp:
        ways = {
            "kokoro, another seed": lambda t: tts.create(t, voice, seed=1)[0],
            "synth --stream": _synth(root, voice, Path(tmp)),
            "serve": _served(root, voice, "sentences"),
            "first clause": lambda t: _joined(tts(t, voice, cuts=FIRST_CLAUSE)),
            "synth --stream --cuts fast": _synth(root, voice, Path(tmp), "--cuts", "fast"),
            "serve --cuts fast": _served(root, voice, "fast-shared"),
        }
        table = cuts.rows(cuts.TEXTS, lambda t: tts.create(t, voice)[0], ways)
    doc: dict[str, Any] = {
        "target": target,
        "picked": why,
        "voice": voice,
        "cpu": this_cpu().as_dict(),
        "load_before": load_before,
        "load_after": load_average(),
        "texts": len(cuts.TEXTS),
        "sentences": len(cuts.SENTENCES),
        "ways": {},
    }
    for name, table_rows in table.items():
        for part, texts in (("sentences", cuts.SENTENCES), ("paragraphs", cuts.PARAGRAPHS)):
            picked = [r for r in table_rows if r["text"] in texts]
            doc["ways"].setdefault(name, {})[part] = cuts.judge(picked)
        doc["ways"][name]["rows"] = table_rows
        verdict = doc["ways"][name]["sentences"]
        log(
            f"{name}: F0 {verdict['f0_rmse_cents']:.0f} cents, extra pauses "
            f"{verdict['extra_pauses_per_sentence']:.2f}, duration "
            f"{verdict['duration_ratio']:.2f}, extra WER {verdict['extra_wer']:.3f}: "
            f"{'pass' if verdict['pass'] else 'fail'}"
        )
    write_json(artifacts.bench_cuts_file(root), doc)
    return doc


def _joined(parts) -> np.ndarray:
    return np.concatenate([p.audio for p in parts])


def _synth(root: Path, voice: str, tmp: Path, *flags: str) -> Callable[[str], np.ndarray]:
    """``kokoro-tvm synth --stream FLAGS`` as its users run it, into a float WAV read back."""

    def speak(text: str) -> np.ndarray:
        out = tmp / "synth.wav"
        argv = ["synth", "--artifacts", str(root), "--voice", voice, "--text", text, "--stream"]
        rc = cli.main([*argv, *flags, "--format", "float32", "-o", str(out), "-q"])
        if rc != 0:
            raise RuntimeError(f"kokoro-tvm synth failed ({rc}) on {text!r}")
        audio, _ = read_wav(out)
        os.unlink(out)
        return audio

    return speak


def _served(root: Path, voice: str, profile: str) -> Callable[[str], np.ndarray]:
    """What the server streams for a request (``Engine.open``: the runtime call the HTTP
    layer makes), with ``profile``'s cuts as ``serve --cuts`` sets them."""
    engine = Engine(ServerConfig(artifacts=root, warmup=False, cuts=PROFILES[profile]))

    def speak(text: str) -> np.ndarray:
        req = speech_request({"input": text, "voice": voice}, engine.config.max_input_chars)
        return _joined(engine.open(req))

    return speak


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
