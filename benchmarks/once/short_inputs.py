"""Where the time goes at short inputs (issue 27): per component, the compiled runtime beside eager
kokoro on the same chunk, and the decoder's top kernels at that length.

usage: python benchmarks/once/short_inputs.py [--artifacts artifacts] [--lengths 30 45 60]
                                         [--repeats 5] [--voice jf_alpha] [--threads N]
                                         [--out short.json]

For each phoneme count (``eval.samples.phonemes``: English sample text, cut at a word) it plans
one chunk with the runtime, then times, interleaved round by round: the duration library, the text
encoder library, the decoder library, the whole ``synthesize`` call (its host work is the
remainder), and eager ``KModel.forward_with_tokens`` on the same ids, voice row and decoder draws
(``eval.e2e.eager_chunk``), with forward hooks timing kokoro's own modules (``bert`` ..
``decoder``). Prints medians, each component's share, the TVM/eager ratio per component, and the
decoder's top kernels at this length with their GFLOP/s (``eval.roofline.kernel_profile``) beside
the measured FMA peak. Records the CPU, its load average and the thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--lengths", type=int, nargs="*", default=[30, 45, 60])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--voice", default="jf_alpha")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", help="also write the rows as JSON")
    args = ap.parse_args()

    import numpy as np
    import torch

    from kokoro_tvm import KokoroTVM, artifacts
    from kokoro_tvm.eval import e2e, roofline, samples
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.eval.timing import apply_threads, cpu_name, time_interleaved
    from kokoro_tvm.runtime import alignment, decoder, planner
    from kokoro_tvm.runtime.manifest import thawed

    threads = apply_threads(args.threads)
    root = Path(args.artifacts)
    tts = KokoroTVM.from_manifest(root, num_threads=threads)
    libs = tts.libraries
    _, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    pack = tts.voice_pack(args.voice)
    peak = roofline.fma_peak(thawed(tts.manifest.targets[tts.target]), threads)
    print(
        f"{cpu_name()}, target {tts.target}, {threads} threads, load {os.getloadavg()[0]:.2f}, "
        f"FMA peak {peak['gflops']:.0f} GFLOP/s"
    )
    rows = []
    for n in args.lengths:
        ps = samples.phonemes(n)
        (chunk,) = tts.plan(ps, pack)
        decoded = decoder.decode(libs, chunk, np.random.default_rng(0))
        dur, te, dec = (
            libs.get("duration", chunk.token_bucket),
            libs.get("text_encoder", chunk.token_bucket),
            libs.get("decoder", decoded.frame_bucket),
        )
        ids = planner.token_input(chunk.input_ids, dur)
        t = np.array([chunk.n_tokens])
        style = chunk.style
        (t_en,) = te(ids, t)
        en = alignment.expand(chunk.d, chunk.durations, None)
        asr = alignment.expand(t_en[:, :, : chunk.n_tokens], chunk.durations, None)
        dec_args = dec.device_args(
            en, asr, np.array([chunk.n_frames]), style, decoded.rand_ini, decoded.noise
        )
        spent: dict[str, float] = {}
        hooks = []
        for name in (
            "bert",
            "bert_encoder",
            "predictor.text_encoder",
            "predictor.lstm",
            "predictor.shared",
            "text_encoder",
            "decoder",
        ):
            mod = km.get_submodule(name)
            hooks.append(
                mod.register_forward_pre_hook(
                    lambda m, a, name=name: spent.__setitem__(name + "@", time.perf_counter())
                )
            )
            hooks.append(
                mod.register_forward_hook(
                    lambda m, a, o, name=name: spent.__setitem__(
                        name, spent.get(name, 0.0) + time.perf_counter() - spent[name + "@"]
                    )
                )
            )
        eager_parts: dict[str, list[float]] = {}

        def eager():
            spent.clear()
            with torch.inference_mode():
                e2e.eager_chunk(km, SimpleNamespace(chunk=chunk, decoded=decoded), 1.0)
            for k, v in spent.items():
                if not k.endswith("@"):
                    eager_parts.setdefault(k, []).append(v)

        runners = {
            "duration": lambda: dur(ids, t, style[:, libs.style_width // 2 :]),
            "text_encoder": lambda: te(ids, t),
            "decoder": lambda: dec.vm["main"](*dec_args),
            "synthesize": lambda: tts.synthesize(ps, pack),
            "eager": eager,
        }
        ms = {
            k: 1e3 * float(np.median(v))
            for k, v in time_interleaved(runners, args.repeats, warmup=1).items()
        }
        for h in hooks:
            h.remove()
        eager_ms = {
            k: 1e3 * float(np.median(v[1:] if len(v) > 1 else v)) for k, v in eager_parts.items()
        }
        legal = artifacts.load_ir(
            artifacts.legalized_file(
                "decoder", decoded.frame_bucket, root, precision=dec.entry.precision
            )
        )
        prof = roofline.kernel_profile(dec.vm, runners["decoder"], legal, peak["gflops"], top=8)
        host = ms["synthesize"] - ms["duration"] - ms["text_encoder"] - ms["decoder"]
        row = {
            "phonemes": len(ps),
            "tokens": chunk.n_tokens,
            "frames": chunk.n_frames,
            "tvm_ms": ms,
            "tvm_host_ms": host,
            "eager_ms": ms["eager"],
            "eager_modules_ms": eager_ms,
            "speedup_vs_eager": ms["eager"] / ms["synthesize"],
            "decoder_gflops": prof["kernel_gflop"] / (prof["kernel_ms"] / 1e3),
            "decoder_of_peak": prof["kernel_gflop"] / (prof["kernel_ms"] / 1e3) / peak["gflops"],
            "top_kernels": prof["top"],
            "load_avg_1m": os.getloadavg()[0],
        }
        rows.append(row)
        print(
            f"\n{len(ps)} phonemes, {chunk.n_tokens} tokens, {chunk.n_frames} frames: synthesize "
            f"{ms['synthesize']:.0f} ms, eager {ms['eager']:.0f} ms "
            f"({row['speedup_vs_eager']:.2f}x)"
        )
        print(
            f"  TVM: duration {ms['duration']:.1f}, text_encoder {ms['text_encoder']:.1f}, decoder "
            f"{ms['decoder']:.1f} ms ({row['decoder_gflops']:.0f} GFLOP/s, "
            f"{100 * row['decoder_of_peak']:.0f} % of peak), host {host:.1f} ms"
        )
        print("  eager modules: " + ", ".join(f"{k} {v:.1f}" for k, v in eager_ms.items()) + " ms")
        for r in prof["top"]:
            print(
                f"    {r['kernel'][:56]:56s} {r['ms']:7.1f} ms {100 * r['share']:5.1f} % "
                f"{r['gflops']:6.1f} GFLOP/s"
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "cpu": cpu_name(),
                    "target": tts.target,
                    "threads": threads,
                    "peak": peak,
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
