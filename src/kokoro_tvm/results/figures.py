"""The results page's PNG plots, one set per CPU, each titled with that CPU and ISA.

- ``e2e``: real-time factor of the runtime and each peer by input length, and the runtime's
  speed over each peer (``bench_e2e``);
- ``roofline``: per library, the GFLOP/s of TVM, eager kokoro and ONNX Runtime beside the FMA
  peak measured for each target (``bench@…``);
- ``fidelity``: every library's distance to float64 kokoro by length beside float32 kokoro's
  (``validate@…``), and the whole runtime's (``bench_e2e``).

Figures are returned as PNG bytes, so a failure leaves every file as it was. matplotlib comes
with the ``docs`` extra.
"""

from __future__ import annotations

import io
from typing import Any

from ..errors import KokoroTVMError
from . import record
from .tables import RUNNERS, peers

KINDS = ("e2e", "roofline", "fidelity")
RUNTIME = "kokoro-tvm runtime"


class PlotsUnavailable(KokoroTVMError, ImportError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotsUnavailable(
            f"the plots need matplotlib ({e}): pip install -e '.[docs]' (make setup installs it)"
        ) from e
    plt.rcParams.update({"font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # no Software/date metadata: the same record gives the same bytes
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _length_axis(ax, xs: list[int], label: str) -> None:
    """A log axis ticked at the measured lengths only, labelled as plain numbers."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("log")
    ax.set_xticks(sorted(set(xs)), [str(v) for v in sorted(set(xs))])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.tick_params(axis="x", labelrotation=30)  # close lengths (769, 1536) stay readable
    ax.set_xlabel(label)


def e2e(rec: dict[str, Any]) -> bytes:
    plt = _pyplot()
    rows = rec["e2e"]["lengths"]
    x = [r["phonemes"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(x, [r["tvm_s"] / r["audio_s"] for r in rows], "o-", lw=2.2, label=RUNTIME)
    for name in peers(rec):
        y = [r.get(f"{name}_s") for r in rows]
        if all(v is not None for v in y):
            left.plot(
                x, [v / r["audio_s"] for v, r in zip(y, rows)], "o--", label=RUNNERS.get(name, name)
            )
        right.plot(
            x,
            [r.get(f"speedup_vs_{name}") for r in rows],
            "o-",
            label=f"× {RUNNERS.get(name, name)}",
        )
    left.set(
        ylabel="real-time factor (compute s / audio s)",
        title="Time per second of audio (lower is faster)",
    )
    right.axhline(1.0, color="black", lw=0.8)
    right.set(
        ylabel="peer's time / runtime's time",
        title="The runtime's speed over each peer",
    )
    for ax in (left, right):
        _length_axis(ax, x, "phonemes")
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    e = rec["e2e"]
    fig.suptitle(
        f"End to end on {rec['cpu']['label']}\n"
        f"target {e['target']}, {e['threads']} threads, measured {rec['measured']}",
        fontsize=10,
    )
    fig.tight_layout()
    return _png(fig)


def roofline(rec: dict[str, Any]) -> bytes:
    plt = _pyplot()
    timed = [lib for lib in rec["libraries"] if (lib.get("bench") or {}).get("peak_gflops")]
    names = sorted(
        {lib["library"] for lib in timed},
        key=lambda n: [lib["library"] for lib in rec["libraries"]].index(n),
    )
    if not names:
        raise record.RecordError(
            f"{rec['cpu']['id']}: no library was timed on this CPU; nothing to plot"
        )
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), squeeze=False)
    runners = (("tvm", "TVM library"), ("eager", "kokoro eager"), ("ort", "ONNX Runtime"))
    for ax, name in zip(axes[0], names):
        libs = [lib for lib in timed if lib["library"] == name]
        width = 0.8 / len(runners)
        for i, (key, label) in enumerate(runners):
            xs = [j + (i - 1) * width for j in range(len(libs))]
            ys = [lib["bench"].get(f"{key}_gflops") for lib in libs]
            if any(y is not None for y in ys):
                bars = ax.bar(xs, [y or 0 for y in ys], width, label=label)
                if key == "tvm":  # its share of the peak, where the eye looks for it
                    shares = [
                        f"{100 * (y or 0) / lib['bench']['peak_gflops']:.0f} %"
                        for y, lib in zip(ys, libs)
                    ]
                    ax.bar_label(bars, shares, fontsize=7)
        for j, lib in enumerate(libs):
            peak = lib["bench"]["peak_gflops"]
            ax.hlines(
                peak,
                j - 0.45,
                j + 0.45,
                colors="black",
                linestyles="dashed",
                label="measured FMA peak" if j == 0 else None,
            )
        ax.set_xticks(range(len(libs)), [lib["target"] for lib in libs])
        ax.set(
            title=f"{name} ({libs[0]['bench']['gflop']:.3g} GFLOP)",
            ylabel="GFLOP/s (torch's FLOP count)",
        )
        ax.legend(fontsize=7)
    fig.suptitle(
        f"Roofline per component on {rec['cpu']['label']}, {rec['e2e']['threads']} threads, "
        f"measured {rec['measured']}",
        fontsize=10,
    )
    fig.tight_layout()
    return _png(fig)


def fidelity(rec: dict[str, Any]) -> bytes:
    plt = _pyplot()
    checked = [lib for lib in rec["libraries"] if lib.get("validated")]
    names = []
    for lib in checked:
        if lib["library"] not in names:
            names.append(lib["library"])
    fig, axes = plt.subplots(
        1, len(names) + 1, figsize=(3.8 * (len(names) + 1), 4.2), squeeze=False
    )
    for ax, name in zip(axes[0], names):
        libs = [lib for lib in checked if lib["library"] == name]
        ours, f32 = record.fidelity_metric(libs[0]["validation"]["lengths"], name)
        # float32 kokoro is the same reference for every target: drawn from the one run at most
        # lengths
        widest = max(libs, key=lambda lib: len(lib["validation"]["lengths"]))
        for lib in libs:
            lengths = lib["validation"]["lengths"]
            order = sorted(lengths, key=int)
            suffix = " (emulated)" if lib.get("emulated") else ""
            ax.plot(
                [int(n) for n in order],
                [lengths[n][ours] for n in order],
                "o-",
                label=f"{lib['target']}{suffix}",
            )
        lengths = widest["validation"]["lengths"]
        order = sorted(lengths, key=int)
        ax.plot(
            [int(n) for n in order],
            [lengths[n][f32] for n in order],
            "k^--",
            label="float32 kokoro",
        )
        if ours.endswith("_db"):
            ax.set(ylabel="log-mel SNR vs float64 kokoro, dB (higher is closer)")
        else:
            ax.set(yscale="log", ylabel="relative error vs float64 kokoro (lower is closer)")
        ax.set(title=name)
        _length_axis(ax, [int(n) for n in order], "length (tokens or frames)")
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    rows = rec["e2e"]["lengths"]
    x = [r["phonemes"] for r in rows]
    ax.plot(
        x, [r["log_mel_snr_db"] for r in rows], "o-", label=f"{RUNTIME} ({rec['e2e']['target']})"
    )
    ax.plot(x, [r["f32_log_mel_snr_db"] for r in rows], "k^--", label="float32 kokoro")
    ax.set(ylabel="log-mel SNR vs float64 kokoro, dB", title="end to end")
    _length_axis(ax, x, "phonemes")
    ax.legend(fontsize=7)
    fig.suptitle(
        f"Fidelity against kokoro in float64 on {rec['cpu']['label']}, measured {rec['measured']}",
        fontsize=10,
    )
    fig.tight_layout()
    return _png(fig)


def render(rec: dict[str, Any]) -> dict[str, bytes]:
    """Every figure of one CPU's record, by kind."""
    return {"e2e": e2e(rec), "roofline": roofline(rec), "fidelity": fidelity(rec)}
