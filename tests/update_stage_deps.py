"""Rewrite dvc.yaml's package deps to exactly what each stage script imports (other deps stay).

usage: PYTHONPATH=src python tests/update_stage_deps.py   (after adding or moving an import;
tests/test_stage_deps.py fails until dvc.yaml matches)

A ``code_<kind>`` stage gets the files ``stages/<kind>.py`` runs plus those of the fingerprint
script itself; a stage that depends on ``artifacts/code/<kind>.json`` lists no code of its own.
"""
from pathlib import Path

from ruamel.yaml import YAML

from kokoro_tvm.pipeline.code import SRC, stage_files

PKG = SRC / "kokoro_tvm"
yaml = YAML()
yaml.preserve_quotes = True
yaml.width = 115
doc = yaml.load(Path("dvc.yaml"))
done = set()


def package_deps(*scripts: Path) -> list[str]:
    files = {f for s in scripts for f in stage_files(s.resolve()) if f.is_relative_to(PKG)}
    rel = {f.relative_to(PKG).as_posix() for f in files}
    schedule = {f"compile/schedule/{p.name}" for p in (PKG / "compile/schedule").glob("*.py")}
    if schedule <= rel:  # directories wholly imported stay directories
        rel = (rel - schedule) | {"compile/schedule"}
    if any(r.startswith("data/") for r in rel):
        rel = {r for r in rel if not r.startswith("data/")} | {"data"}
    return [f"${{code}}/{r}" for r in sorted(rel, key=lambda r: (r.count("/"), r))]


for name, st in doc["stages"].items():
    deps = st["deps"]
    if id(deps) in done or any(str(d).startswith("artifacts/code/") for d in deps):
        continue
    done.add(id(deps))
    argv = st["cmd"].split()
    scripts = [Path(argv[1])] + ([Path(f"stages/{argv[2]}.py")] if argv[1] == "stages/code.py" else [])
    others = [d for d in deps if not str(d).startswith(("${code}", "stages/"))]
    deps[:] = [*(f"stages/{s.name}" for s in scripts), "stages/_common.py", *package_deps(*scripts), *others]
yaml.dump(doc, Path("dvc.yaml"))
