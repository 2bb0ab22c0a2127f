"""A remote host keeps the agent's code in a private per-user cache by its hash: a launch then sends ~100 bytes
instead of ~200 KiB. The cache is never trusted when another user owns it or may write to it, and a file whose
content does not match its hash is never run."""

from __future__ import annotations

import hashlib
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.agent.bootstrap import BOOTSTRAP, NEEDS_CODE, cached_agent_lines

FIRST, CODE = cached_agent_lines(15.0)
NAME = FIRST[1:].split()[0].decode()


def start_agent(home: Path) -> bool:
    """Start an agent as an SSH session would, with `home` as its HOME; whether it asked for its code. It must
    come up (its `ready` frame) either way; it is then told to leave by the end of its input."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-u", "-c", BOOTSTRAP],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
    )
    assert proc.stdin is not None and proc.stdout is not None
    asked = False
    try:
        proc.stdin.write(FIRST)
        proc.stdin.flush()
        while line := proc.stdout.readline():
            if line.strip() == NEEDS_CODE:
                asked = True
                proc.stdin.write(CODE)
                proc.stdin.flush()
            if b'"event": "ready"' in line:
                break
        else:
            raise AssertionError("the agent never came up")
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    return asked


def cache(home: Path) -> Path:
    return home / ".cache" / "tflaunch" / "agent"


def test_the_code_is_sent_once_then_run_from_a_private_cache(work: Path) -> None:
    assert start_agent(work) is True
    stored = cache(work) / NAME
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == NAME
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    for folder in (cache(work), cache(work).parent):
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert start_agent(work) is False, "the second launch sends only the hash"
    assert len(FIRST) < 200 < 200_000 < len(CODE)


def test_code_that_does_not_match_its_hash_is_never_run(work: Path) -> None:
    start_agent(work)
    stored = cache(work) / NAME
    stored.write_bytes(b"import os; os.system('echo owned')")
    assert start_agent(work) is True
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == NAME, "replaced by the code it was named"


def test_a_cache_others_may_write_to_is_not_used_nor_written(work: Path) -> None:
    start_agent(work)
    cache(work).chmod(0o777)
    (cache(work) / NAME).unlink()
    assert start_agent(work) is True and start_agent(work) is True
    assert not (cache(work) / NAME).exists()


def test_a_link_planted_at_the_cache_path_is_never_followed(work: Path) -> None:
    start_agent(work)
    elsewhere = work / "elsewhere"
    elsewhere.write_bytes((cache(work) / NAME).read_bytes())
    (cache(work) / NAME).unlink()
    (cache(work) / NAME).symlink_to(elsewhere)
    assert start_agent(work) is True
    assert not (cache(work) / NAME).is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the cache to another user")
def test_a_cache_another_user_owns_is_not_trusted(work: Path) -> None:
    start_agent(work)
    nobody = pwd.getpwnam("nobody")
    os.chown(cache(work) / NAME, nobody.pw_uid, nobody.pw_gid)
    assert start_agent(work) is True
    assert (cache(work) / NAME).stat().st_uid == os.geteuid(), "replaced by one of this user's"
    os.chown(cache(work), nobody.pw_uid, nobody.pw_gid)
    assert start_agent(work) is True and start_agent(work) is True
