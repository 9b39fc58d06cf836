"""What the runtime's cuts cost a listener, held against kokoro's whole-sentence rendition.

Each way of speaking (``Renderer``: text in, float audio out) says the same texts; each rendition
is compared with kokoro's own (``create()``: kokoro's chunks, whole sentences) by
``prosody.cut_cost``, and a second seed of kokoro's own gives the floor: what two renditions
that differ only in the decoder's random draws already differ by. ``judge`` holds the means over
the texts to ``prosody.CutBounds``.

The texts are the project's own and used nowhere else (no test tunes to them): single sentences,
where a cut inside the sentence is the only cut there is, and short paragraphs, where a cut at a
sentence end (the ``sentences`` cuts) is measured against kokoro, which speaks a paragraph of
up to 510 phonemes as one utterance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import asr, prosody

Renderer = Callable[[str], np.ndarray]

SENTENCES = (
    "Please leave the package at the front door before noon.",
    "Scientists discovered a new species of frog in the mountains of Peru.",
    "If the weather holds, we will walk along the river after lunch.",
    "The library closes early on Fridays, so return your books by four.",
    "My grandmother kept a small garden of herbs behind her kitchen window.",
    "After the meeting, the team agreed to move the launch to next spring.",
)
PARAGRAPHS = (
    "The train was late again this morning. Nobody on the platform seemed surprised. "
    "A few people laughed and went to buy coffee.",
    "Turn left at the bakery and walk two blocks. The museum is on your right. "
    "You cannot miss its red doors.",
    "We tested the new bridge for three weeks. It held every load we tried. "
    "The city will open it to traffic on Monday.",
)
TEXTS = SENTENCES + PARAGRAPHS


def rows(
    texts: tuple[str, ...],
    reference: Renderer,
    ways: dict[str, Renderer],
    listen: Callable[[np.ndarray], str] | None = asr.transcribe,
) -> dict[str, list[dict[str, Any]]]:
    """For each way, one row per text: its ``CutCost`` against ``reference`` as a dict (and the
    words ``listen`` heard in both, when given)."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in ways}
    for text in texts:
        ref = reference(text)
        heard_ref = listen(ref) if listen else ""
        ref_wer = asr.word_error_rate(text, heard_ref) if listen else float("nan")
        for name, speak in ways.items():
            got = speak(text)
            heard = listen(got) if listen else ""
            wer = asr.word_error_rate(text, heard) if listen else float("nan")
            cost = prosody.cut_cost(ref, got, wer, ref_wer)
            out[name].append(
                {
                    "text": text,
                    "f0_rmse_cents": cost.f0_rmse_cents,
                    "pauses": cost.pauses,
                    "reference_pauses": cost.reference_pauses,
                    "duration_ratio": cost.duration_ratio,
                    "wer": cost.wer,
                    "reference_wer": cost.reference_wer,
                    "heard": heard,
                    "reference_heard": heard_ref,
                }
            )
    return out


BOUNDS = prosody.CutBounds()


def judge(table: list[dict[str, Any]], bounds: prosody.CutBounds = BOUNDS) -> dict:
    """One way's rows held to ``bounds`` (``prosody.judge``)."""
    costs = [
        prosody.CutCost(
            r["f0_rmse_cents"],
            r["pauses"],
            r["reference_pauses"],
            r["duration_ratio"],
            r["wer"],
            r["reference_wer"],
        )
        for r in table
    ]
    return prosody.judge(costs, bounds)
