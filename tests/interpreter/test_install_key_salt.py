"""The install cache's key is keyed with a per-machine salt (acx.interpreter._keyed): it folds in
the values of the variables the install sees, which may be secrets, and it is written to
result.json and an image tag — a plain hash would let anyone with the results test guesses of a
weak secret offline (secrets never reach result files, whole or in part)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

PROG = "from acx.interpreter._keyed import keyed_digest; print(keyed_digest(b'TOKEN=hunter2'))"


def _digest(cache_home: Path) -> str:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    out = subprocess.run([sys.executable, "-c", PROG], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_stable_across_processes_sharing_a_cache_directory(tmp_path: Path) -> None:
    first, second = _digest(tmp_path), _digest(tmp_path)
    assert first == second  # a later run finds the image an earlier one installed
    salt = tmp_path / "acx" / "install-cache.salt"
    assert stat.S_IMODE(salt.stat().st_mode) == 0o600 and len(salt.read_bytes()) == 32


def test_not_a_plain_hash_and_different_on_another_machine(tmp_path: Path) -> None:
    ours = _digest(tmp_path / "a")
    assert ours != hashlib.sha256(b"TOKEN=hunter2").hexdigest()
    assert ours != _digest(tmp_path / "b")  # another salt: nothing to compare a guess with


def test_without_a_cache_directory_the_salt_lives_for_the_process(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")  # the cache directory cannot be created under a file
    assert _digest(not_a_dir) != _digest(not_a_dir)
