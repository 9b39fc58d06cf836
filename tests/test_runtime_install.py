"""The runtime installs without the compiler: a venv with the package's base requirements (numpy
and the TVM runtime; no torch, kokoro or dvc) synthesizes from built artifacts, and gives the
same audio as the full environment."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO
from runtime_project import runtime_artifacts

PHONEMES = "həlˈO wˈɜɹld"


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runtime-venv") / "venv"
    venv.create(root, with_pip=True)
    py = root / "bin" / "python"
    # the base install at the pins of requirements.lock, so the TVM runtime is the one that built
    p = subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-c",
            str(REPO / "requirements.lock"),
            str(REPO),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return root


def test_base_install_has_no_torch(runtime_venv):
    py = runtime_venv / "bin" / "python"
    for module in ("torch", "kokoro", "dvc", "transformers"):
        p = subprocess.run([str(py), "-c", f"import {module}"], capture_output=True, text=True)
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, module


def test_torch_free_venv_synthesizes_what_the_full_environment_does(
    runtime_venv, tmp_path, tmp_path_factory
):
    from kokoro_tvm.runtime.synthesizer import KokoroTVM
    from kokoro_tvm.runtime.wav import read_wav, write_wav

    artifacts = runtime_artifacts(tmp_path_factory)
    out = tmp_path / "venv.wav"
    script = (
        "import sys\nfrom kokoro_tvm.runtime.cli import main\n"
        f"code = main(['synth', '--phonemes', {PHONEMES!r}, '--voice', 'random', '--artifacts', "
        f"{str(artifacts)!r}, '-o', {str(out)!r}, '-q'])\n"
        "assert 'torch' not in sys.modules, 'the runtime imported torch'\n"
        "from kokoro_tvm.runtime import tvm_runtime\n"
        "assert 'tvm' not in sys.modules and tvm_runtime.loaded_directly()\n"
        "import os\nassert 'TVM_USE_RUNTIME_LIB' not in os.environ\nsys.exit(code)\n"
    )
    p = subprocess.run(
        [str(runtime_venv / "bin" / "kokoro-tvm"), "--help"], capture_output=True, text=True
    )
    assert p.returncode == 0 and "synth" in p.stdout
    p = subprocess.run(
        [str(runtime_venv / "bin" / "python"), "-c", script], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got, rate = read_wav(out)
    here = tmp_path / "here.wav"
    write_wav(here, KokoroTVM.from_manifest(artifacts).synthesize(PHONEMES, "random").audio, 24000)
    want, _ = read_wav(here)
    assert rate == 24000 and got.size > 0
    np.testing.assert_array_equal(got, want)


def _speak(artifacts: Path) -> str:
    """A script that speaks once from ``artifacts`` through the Python API."""
    return (
        "import sys\nfrom kokoro_tvm.runtime.synthesizer import KokoroTVM\n"
        f"KokoroTVM.from_manifest({str(artifacts)!r}).synthesize({PHONEMES!r}, 'random')\n"
        "from kokoro_tvm.runtime import tvm_runtime\n"
    )


def test_torch_free_runtime_runs_without_the_tvm_package(runtime_venv, tmp_path_factory):
    """The ``tvm`` package's import costs a runtime process start-up time and its compiler
    library memory (``runtime.tvm_runtime``); ``TVM_USE_RUNTIME_LIB=0`` keeps them where a
    process wants them."""
    py = str(runtime_venv / "bin" / "python")
    script = _speak(runtime_artifacts(tmp_path_factory)) + (
        "print('tvm' in sys.modules, tvm_runtime.loaded_directly())\n"
    )
    p = subprocess.run([py, "-c", script], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["False", "True"]
    p = subprocess.run(
        [py, "-c", script + "import tvm\nprint('tvm_compiler' in tvm.base._LOADED_LIBS)\n"],
        capture_output=True,
        text=True,
        env={**os.environ, "TVM_USE_RUNTIME_LIB": "0"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split() == ["True", "False", "True"]  # control: the package, whole


def test_the_command_line_runs_without_the_tvm_package_beside_torch(tmp_path_factory, tmp_path):
    """``kokoro-tvm`` never compiles, so even in the build venv (torch installed) it imports
    neither the ``tvm`` package nor torch (``tvm_import.prefer_runtime_only``)."""
    artifacts = runtime_artifacts(tmp_path_factory)
    script = (
        "import sys\nfrom kokoro_tvm.runtime import cli\n"
        f"assert cli.main(['synth', '--phonemes', {PHONEMES!r}, '--voice', 'random', "
        f"'--artifacts', {str(artifacts)!r}, '-o', {str(tmp_path / 'a.wav')!r}, '-q']) == 0\n"
        "from kokoro_tvm.runtime import tvm_runtime\n"
        "print('tvm' in sys.modules, 'torch' in sys.modules, tvm_runtime.loaded_directly())\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TVM_USE_RUNTIME_LIB"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-3:] == ["False", "False", "True"]  # after the summary line


def test_build_environment_keeps_the_compiler_after_the_runtime_loads():
    """With torch installed (the build side), importing the runtime first must not take the
    compiler away from the stages that import it next."""
    script = (
        "import kokoro_tvm.runtime.synthesizer, tvm\nfrom tvm import relax\n"
        "assert not kokoro_tvm.runtime.tvm_import.runtime_only(tvm)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TVM_USE_RUNTIME_LIB"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
