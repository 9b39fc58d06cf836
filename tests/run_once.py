"""Files that several test modules need, built once per test run, also across pytest-xdist
workers."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

#: name -> the tree built in this process (runs without pytest-xdist)
_BUILT: dict[str, Path] = {}


def once(
    tmp_path_factory,
    name: str,
    build: Callable[[Path], object],
    copy: bool,
    into: Path | None = None,
) -> Path:
    """The directory that ``build(dir)`` fills, built once per test run.

    Under pytest-xdist (``make test``) the first worker that asks builds it in the run's shared
    temp dir while the others wait for it; without xdist, the first caller builds it. ``copy``
    gives each call its own copy (for tests that change what they get), else all read the one
    build; ``into``: where that copy goes (a test's ``tmp_path``, which goes when it passes),
    else a new dir that lasts the run."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        if name not in _BUILT:
            tree = tmp_path_factory.mktemp(f"shared-{name}")
            build(tree)
            _BUILT[name] = tree
        tree = _BUILT[name]
    else:
        from filelock import FileLock

        shared = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
        with FileLock(f"{shared}.lock"):
            if not (shared / "complete").exists():  # a worker that failed mid-build left no marker
                shutil.rmtree(shared, ignore_errors=True)
                build(shared / "tree")
                (shared / "complete").touch()
        tree = shared / "tree"
    if not copy:
        return tree
    root = into if into is not None else tmp_path_factory.mktemp(name)
    shutil.copytree(tree, root, symlinks=True, dirs_exist_ok=True, copy_function=_link_objects)
    return root


def _link_objects(src: str, dst: str) -> str:
    """Copy a file, but hard-link a content-addressed object: DVC's cache and its remotes keep
    each file under ``files/md5/`` named by its hash and only ever add or delete one, never
    rewrite it, so every copy of a tree can share them (they are most of its bytes)."""
    if f"{os.sep}files{os.sep}md5{os.sep}" in src:
        try:
            os.link(src, dst)
            return dst
        except OSError:  # another filesystem, or links not allowed: a copy does the same
            pass
    return shutil.copy2(src, dst)
