"""Validation of ``params.yaml``: every stage calls this first, so bad params fail before any work.

Each error names the offending key and says how to fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .config import MODEL_CONFIGS

COMPONENTS = {"duration": "tokens", "text_encoder": "tokens", "decoder": "frames"}
LSTM_STRATEGIES = ("unroll", "loop")
TARGET_KINDS = ("llvm",)
TOOLCHAIN_KEYS = ("torch", "apache-tvm", "apache-tvm-ffi", "kokoro", "transformers", "llvm_major")
MAX_TOKENS = 512  # ALBERT position table: 510 phonemes + 2 boundary tokens
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class ParamsError(ValueError):
    """A params.yaml problem; the message names the key."""


@dataclass(frozen=True)
class Params:
    model_config: str
    checkpoint: str
    seed: int
    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    lstm_strategy: str
    targets: dict[str, dict[str, Any]]
    toolchain: dict[str, Any]
    num_threads: int
    bench_repeats: int = 10
    bench_onnxruntime: bool = True
    tune_trials: int = 0

    def buckets(self, component: str) -> tuple[int, ...]:
        return self.tokens if COMPONENTS[check_component(component)] == "tokens" else self.frames


def check_component(name: str) -> str:
    if name not in COMPONENTS:
        raise ParamsError(f"unknown component {name!r}; choose one of {sorted(COMPONENTS)}")
    return name


def _get(d: dict[str, Any], key: str, path: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise ParamsError(f"params.yaml: missing key '{path}'")
    return d[key]


def _bucket_list(value: Any, key: str, limit: int | None) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ParamsError(f"params.yaml: '{key}' must be a non-empty list of positive integers, got {value!r}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ParamsError(f"params.yaml: '{key}' has a non-integer bucket {v!r}; use whole numbers")
        if v <= 0:
            raise ParamsError(f"params.yaml: '{key}' has a bucket {v} <= 0; buckets must be positive")
        if limit is not None and v > limit:
            raise ParamsError(f"params.yaml: '{key}' has a bucket {v} above the model limit {limit}")
    dupes = sorted({v for v in value if value.count(v) > 1})
    if dupes:
        raise ParamsError(f"params.yaml: '{key}' lists bucket(s) {dupes} more than once; remove the duplicates")
    return tuple(sorted(value))


def _target(name: Any, spec: Any) -> dict[str, Any]:
    key = f"targets.{name}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise ParamsError(f"params.yaml: target name {name!r} must use letters, digits and '_' only")
    if not isinstance(spec, dict):
        raise ParamsError(f"params.yaml: '{key}' must be a mapping like {{kind: llvm, mcpu: x86-64-v3}}")
    kind = spec.get("kind")
    if kind not in TARGET_KINDS:
        raise ParamsError(f"params.yaml: '{key}.kind' is {kind!r}; supported target kinds: {list(TARGET_KINDS)}")
    return dict(spec)


def parse(raw: Any) -> Params:
    if not isinstance(raw, dict):
        raise ParamsError("params.yaml: top level must be a mapping with keys model, buckets, lstm, targets")
    model = _get(raw, "model", "model")
    config = _get(model, "config", "model.config")
    if config not in MODEL_CONFIGS:
        raise ParamsError(f"params.yaml: 'model.config' is {config!r}; choose one of {list(MODEL_CONFIGS)}")
    checkpoint = _get(model, "checkpoint", "model.checkpoint")
    if not isinstance(checkpoint, str) or not checkpoint:
        raise ParamsError("params.yaml: 'model.checkpoint' must be 'random', a Hugging Face repo id or a .pth path")
    seed = model.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParamsError(f"params.yaml: 'model.seed' must be an integer, got {seed!r}")
    buckets = _get(raw, "buckets", "buckets")
    tokens = _bucket_list(_get(buckets, "tokens", "buckets.tokens"), "buckets.tokens", MAX_TOKENS)
    frames = _bucket_list(_get(buckets, "frames", "buckets.frames"), "buckets.frames", None)
    strategy = _get(_get(raw, "lstm", "lstm"), "strategy", "lstm.strategy")
    if strategy not in LSTM_STRATEGIES:
        raise ParamsError(f"params.yaml: 'lstm.strategy' is {strategy!r}; choose one of {list(LSTM_STRATEGIES)}")
    targets_raw = _get(raw, "targets", "targets")
    if not isinstance(targets_raw, dict) or not targets_raw:
        raise ParamsError("params.yaml: 'targets' must map target names to specs, e.g. x86_64: {kind: llvm}")
    targets = {name: _target(name, spec) for name, spec in targets_raw.items()}
    toolchain = raw.get("toolchain") or {}
    if not isinstance(toolchain, dict):
        raise ParamsError("params.yaml: 'toolchain' must map package names to pinned versions")
    for key, value in toolchain.items():
        if key not in TOOLCHAIN_KEYS:
            raise ParamsError(f"params.yaml: unknown key 'toolchain.{key}'; known: {list(TOOLCHAIN_KEYS)}")
        if key == "llvm_major" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ParamsError(f"params.yaml: 'toolchain.llvm_major' must be an integer, got {value!r}")
    threads = (raw.get("runtime") or {}).get("num_threads", 0)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ParamsError(f"params.yaml: 'runtime.num_threads' must be an integer >= 0 (0 = all cores), got {threads!r}")
    bench = raw.get("bench") or {}
    repeats = bench.get("repeats", 10)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ParamsError(f"params.yaml: 'bench.repeats' must be an integer >= 1, got {repeats!r}")
    use_ort = bench.get("onnxruntime", True)
    if not isinstance(use_ort, bool):
        raise ParamsError(f"params.yaml: 'bench.onnxruntime' must be true or false, got {use_ort!r}")
    trials = (raw.get("tune") or {}).get("trials", 0)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise ParamsError(f"params.yaml: 'tune.trials' must be an integer >= 0 (MetaSchedule trials per "
                          f"kernel; 0 = rules only), got {trials!r}")
    return Params(config, checkpoint, seed, tokens, frames, strategy, targets, dict(toolchain), threads,
                  repeats, use_ort, trials)


def load(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: not found; run from the repository root or pass --params")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: malformed YAML ({e}); fix the syntax") from e
    return parse(raw)
