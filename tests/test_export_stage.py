"""The export stage writes the same bytes for the same graph, so DVC stops at an unchanged
``.pt2``."""

from __future__ import annotations

import contextlib
import zipfile
from pathlib import Path

import pytest
import yaml
from runtime_project import RUNTIME_PARAMS

from kokoro_tvm import artifacts
from kokoro_tvm.model import components
from kokoro_tvm.pipeline import export
from kokoro_tvm.pipeline.common import setup


def test_two_exports_are_the_same_bytes(tmp_path):
    """torch names a ``.pt2``'s root folder after the file it saves to; saved to the atomic
    write's random temp name, two exports of one graph differed in those names alone."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(RUNTIME_PARAMS, sort_keys=False))
    with contextlib.chdir(tmp_path):
        prm = setup("params.yaml")
        bucket = prm.buckets.of("text_encoder")[0]
        path = artifacts.export_file("text_encoder", bucket)
        export.run(prm, "text_encoder", bucket)
        first = path.read_bytes()
        export.run(prm, "text_encoder", bucket)
        assert path.read_bytes() == first
        names = zipfile.ZipFile(path).namelist()
    assert all(not n.startswith(".") and ".tmp" not in n for n in names), names[:3]


@pytest.mark.parametrize("stripped", [True, False], ids=["stage", "control-with-traces"])
def test_an_export_names_no_source_location(tmp_path, monkeypatch, stripped: bool):
    """torch.export keeps each node's stack trace: the checkout's absolute path and the model
    code's line numbers, which a clone elsewhere or a moved line would change. The control saves
    the traces and finds the path."""
    if not stripped:
        monkeypatch.setattr(export, "without_source_locations", lambda ep: ep)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(RUNTIME_PARAMS, sort_keys=False))
    with contextlib.chdir(tmp_path):
        prm = setup("params.yaml")
        bucket = prm.buckets.of("text_encoder")[0]
        export.run(prm, "text_encoder", bucket)
        archive = zipfile.ZipFile(artifacts.export_file("text_encoder", bucket))
        text = "".join(archive.read(n).decode() for n in archive.namelist() if n.endswith(".json"))
    model_code = str(Path(components.__file__).parent)
    assert (model_code in text) is not stripped
    assert ("stack_trace" in text) is not stripped


@pytest.mark.parametrize("stripped", [True, False], ids=["save_ir", "control-save_json"])
def test_saved_ir_names_no_source_location(tmp_path, stripped: bool):
    """A TVMScript kernel (the LSTM recurrence) keeps spans naming its source file and lines;
    ``save_ir`` empties them and the module loads back the same."""
    import tvm

    from kokoro_tvm.compile import lstm_lowering

    mod = tvm.IRModule({"lstm": lstm_lowering._recurrence_kernel(1, 4, 8)})
    path = tmp_path / "mod.json"
    if stripped:
        artifacts.save_ir(path, mod)
    else:
        path.write_text(tvm.ir.save_json(mod))
    text = path.read_text().replace("\\/", "/")
    assert (str(Path(lstm_lowering.__file__)) in text) is not stripped
    assert artifacts.load_ir(path).script() == mod.script()
