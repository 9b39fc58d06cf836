"""Files checked against the sha256 their producer recorded, before anything reads them: loading
a library runs its code, and a flipped byte in weights is wrong audio, not an error.

Hashing a target's files (about 350 MB) takes a core a quarter of a second, as long as the rest
of a cold start's critical path. ``verify_ahead`` starts it on a background thread as soon as the
files are known, while the caller goes on importing TVM and reading its input (hashlib releases
the GIL, so the two run on two cores); ``verify_file`` then takes the digest computed ahead
instead of hashing again. A digest is taken once, and only if the file's identity (device,
inode, size, modification and change times) is the one it had when hashing started: a file
replaced or written since is hashed again, in the caller.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path

from .. import artifacts

_lock = threading.Lock()
_ahead: dict[str, tuple[tuple[int, ...], Future]] = {}


def _identity(path: Path) -> tuple[int, ...]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def verify_ahead(paths: Iterable[Path]) -> None:
    """Hash ``paths`` one after another on a background (daemon) thread, in the order given
    (the order the caller will need them). Missing files are left to ``verify_file``."""
    jobs = []
    with _lock:
        for path in paths:
            key = str(Path(path).resolve())
            if key in _ahead:
                continue
            try:
                ident = _identity(Path(key))
            except OSError:
                continue
            fut: Future = Future()
            _ahead[key] = (ident, fut)
            jobs.append((Path(key), fut))
    if jobs:
        threading.Thread(target=_hash_all, args=(jobs,), name="kokoro-verify", daemon=True).start()


def _hash_all(jobs: list[tuple[Path, Future]]) -> None:
    for path, fut in jobs:
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(_sha256_whole(path))
        except BaseException as e:  # the caller hashes it again and reports what it finds
            fut.set_exception(e)


def _sha256_whole(path: Path) -> str:
    """sha256 in one call over the mapped file: hashlib holds no GIL for the whole file, so a
    main thread that keeps the GIL in C code for a while (TVM's first type lookup) cannot stall
    it between blocks."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return hashlib.sha256(b"").hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return hashlib.sha256(mm).hexdigest()


def _digest(path: Path) -> str:
    """``path``'s sha256: the one hashed ahead when the file is still the same one, else now."""
    key = str(path.resolve())
    with _lock:
        ahead = _ahead.pop(key, None)
    if ahead is not None:
        ident, fut = ahead
        try:
            digest = fut.result()
            if _identity(path) == ident:
                return digest
        except Exception:
            pass
    return artifacts.sha256(path)


def verify_file(path: Path, expected: str, source: str) -> str:
    """The file's sha256, after checking it is ``expected`` (what ``source`` recorded)."""
    if not path.exists():
        raise artifacts.ArtifactError(f"{path} is missing; run `dvc repro` (or `dvc pull`)")
    actual = _digest(path)
    if actual != expected:
        raise artifacts.ArtifactError(
            f"{path} does not match the sha256 recorded in {source} (tampered or stale); "
            "run `dvc checkout` or `dvc repro`"
        )
    return actual
