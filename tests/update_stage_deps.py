"""Rewrite dvc.yaml's package deps to exactly what each stage script imports (other deps stay).

usage: PYTHONPATH=src python tests/update_stage_deps.py   (after adding or moving an import;
tests/test_stage_deps.py fails until dvc.yaml matches)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from import_graph import package_files
from ruamel.yaml import YAML

yaml = YAML()
yaml.preserve_quotes = True
yaml.width = 115
doc = yaml.load(Path("dvc.yaml"))
src = Path("src")
done = set()
for name, st in doc["stages"].items():
    deps = st["deps"]
    if id(deps) in done:
        continue
    done.add(id(deps))
    script = Path(st["cmd"].split()[1])
    files = package_files(script, src) | package_files(Path("stages/_common.py"), src)
    rel = sorted(str(f.relative_to("src/kokoro_tvm")) for f in files)
    # directories wholly imported stay directories (compile/schedule)
    code = []
    if all(f"compile/schedule/{p.name}" in rel for p in Path("src/kokoro_tvm/compile/schedule").glob("*.py")):
        rel = [r for r in rel if not r.startswith("compile/schedule/")] + ["compile/schedule"]
    if "config.py" in rel:
        rel.append("data")
    order = lambda r: (r.count("/"), r)
    code = [f"${{code}}/{r}" for r in sorted(rel, key=order)]
    others = [d for d in deps if not str(d).startswith(("${code}", "stages/"))]
    new = [f"stages/{script.name}", "stages/_common.py", *code, *others]
    deps[:] = new
yaml.dump(doc, Path("dvc.yaml"))
