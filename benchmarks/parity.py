"""Full-length parity of every library in artifacts/manifest.json against eager kokoro.

usage: python benchmarks/parity.py [--out parity.json]   (after `dvc repro`, from the repo root)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kokoro_tvm import stages
from kokoro_tvm.config import load_model_config
from kokoro_tvm.model import build_kmodel
from kokoro_tvm.validate import full_length_parity


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="parity.json")
    args = ap.parse_args()
    prm = stages.setup()
    cfg = load_model_config(prm.model_config)
    rows = full_length_parity(Path("artifacts"), build_kmodel(cfg, prm.checkpoint, prm.seed), cfg)
    Path(args.out).write_text(json.dumps(rows, indent=2))
    for r in rows:
        metric = f"log-mel SNR {r['log_mel_snr_db']:.1f} dB" if "log_mel_snr_db" in r else f"rel err {r['rel_err']:.2e}"
        print(f"{r['component']:13s} {r['bucket']:5d} {r['target']:10s} {metric:24s} {'ok' if r['ok'] else 'FAIL'}")
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
