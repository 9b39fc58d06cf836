"""The export stage writes the same bytes for the same graph, so DVC stops at an unchanged
``.pt2``."""

from __future__ import annotations

import contextlib
import zipfile

import yaml
from runtime_project import RUNTIME_PARAMS

from kokoro_tvm import artifacts
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
