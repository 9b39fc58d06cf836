"""``python -m kokoro_tvm.results`` (``make results``): collect this machine's metrics from a
finished ``dvc repro`` into its CPU's results file, then render ``docs/results.md``, its plots and
the README's table from every CPU's file. ``--render-only`` skips the collection (any machine)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import artifacts, atomic
from ..commands import exit_status
from . import figures, machine, record, tables


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kokoro_tvm.results", description=__doc__)
    p.add_argument(
        "--artifacts", default=str(artifacts.ROOT), help="the dvc repro's outputs (artifacts)"
    )
    p.add_argument("--params", default="params.yaml", help="the params it ran (params.yaml)")
    p.add_argument("--docs", default="docs", help="where results.md and results/ go (docs)")
    p.add_argument("--readme", default="README.md", help="the README with the results markers")
    p.add_argument(
        "--render-only",
        action="store_true",
        help="render from the committed results files; collect nothing",
    )
    return p.parse_args(argv)


def collected(args: argparse.Namespace) -> dict[str, Any]:
    from ..params import load
    from .collect import collect

    cpu = machine.this_cpu()  # first: results that name no CPU are not worth reading params for
    return collect(Path(args.artifacts), load(args.params), cpu)


def run(args: argparse.Namespace) -> list[Path]:
    """Everything is computed before anything is written; returns the files written."""
    folder = Path(args.docs) / "results"
    readme = Path(args.readme)
    new = None if args.render_only else collected(args)
    have = folder.is_dir() and any(folder.glob("*.json"))
    records = {r["cpu"]["id"]: r for r in record.load_all(folder)} if have or new is None else {}
    if new is not None:
        records[new["cpu"]["id"]] = new  # a CPU's newer run replaces its file
    ordered = [records[k] for k in sorted(records)]
    pngs: dict[Path, bytes] = {}
    links: dict[str, dict[str, str]] = {}
    for rec in ordered:
        cpu_id = rec["cpu"]["id"]
        links[cpu_id] = {}
        for kind, png in figures.render(rec).items():
            pngs[folder / f"{cpu_id}-{kind}.png"] = png
            links[cpu_id][kind] = f"results/{cpu_id}-{kind}.png"
    page = tables.results_page(ordered, links)
    if not readme.exists():
        raise record.RecordError(
            f"{readme}: not found; pass --readme or run from the repository root"
        )
    text = tables.replace_readme_block(
        readme.read_text(encoding="utf-8"), tables.readme_table(ordered), str(readme)
    )
    written = []
    if new is not None:
        path = folder / f"{new['cpu']['id']}.json"
        atomic.write_json(path, new)
        written.append(path)
    for path, png in pngs.items():
        with atomic.atomic_path(path) as tmp:
            tmp.write_bytes(png)
        written.append(path)
    for stale in set(folder.glob("*.png")) - pngs.keys():  # a CPU's file was removed
        stale.unlink()
    atomic.write_text(Path(args.docs) / "results.md", page)
    atomic.write_text(readme, text)
    return written + [Path(args.docs) / "results.md", readme]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def body() -> None:
        for path in run(args):
            print(f"wrote {path}")

    return exit_status(body)


if __name__ == "__main__":
    raise SystemExit(main())
