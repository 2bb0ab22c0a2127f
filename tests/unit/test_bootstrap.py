"""The agent's first line: its modules' sources, and their bytecode as the launcher's python cached
it, used by an agent whose python reads that bytecode; any other compiles the sources."""

from __future__ import annotations

import base64
import marshal
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.agent import bootstrap
from launcher.agent.bootstrap import MAIN, MODULES, agent_argv, agent_line


def _line(change: Callable[[dict[str, Any]], None]) -> bytes:
    import importlib.util
    import py_compile

    for name in MODULES:  # as an install leaves them (pip and scripts/setup.sh compile the project)
        origin = importlib.util.find_spec(name).origin  # type: ignore[union-attr]
        py_compile.compile(str(origin), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP, doraise=True)
    bootstrap._codes.cache_clear()
    bundle = marshal.loads(zlib.decompress(base64.b64decode(agent_line(15.0, watch_silence=False))))
    change(bundle)
    return base64.b64encode(zlib.compress(marshal.dumps(bundle, 4))) + b"\n"


def _run(line: bytes) -> tuple[int, bytes]:
    """Start an agent with `line`, close its input (it leaves), and return its exit code and output."""
    agent = subprocess.run(agent_argv(sys.executable), input=line, capture_output=True, timeout=60)
    return agent.returncode, agent.stdout + agent.stderr


def _main_source_exits_7(bundle: dict[str, Any]) -> None:
    bundle["modules"] = [
        (name, "raise SystemExit(7)" if name == MAIN else source) for name, source in bundle["modules"]
    ]


def test_an_agent_of_the_same_python_runs_the_shipped_bytecode() -> None:
    line = _line(_main_source_exits_7)
    assert set(bootstrap._codes()) == set(MODULES)  # every module's bytecode went with it
    code, out = _run(line)  # the source says exit 7; the bytecode is the agent
    assert code == 0 and b'"event": "ready"' in out, (code, out)


def test_an_agent_of_another_python_compiles_the_sources() -> None:
    def another_python(bundle: dict[str, Any]) -> None:
        _main_source_exits_7(bundle)
        bundle["magic"] = b"\x00\x00\r\n"  # no python's bytecode

    code, out = _run(_line(another_python))
    assert code == 7, (code, out)
    code, out = _run(_line(lambda bundle: bundle.update(magic=b"\x00\x00\r\n")))  # the real sources run as well
    assert code == 0 and b'"event": "ready"' in out, (code, out)


def test_only_a_fresh_cache_of_this_python_is_shipped(tmp_path: Path) -> None:
    import os
    import py_compile

    source = tmp_path / "m.py"
    source.write_text("X = 1\n")
    py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP, doraise=True)
    code = bootstrap._cached_bytecode(str(source))
    assert code is not None and marshal.loads(code).co_consts[0] == 1
    source.write_text("X = 22\n")  # changed since: another size
    assert bootstrap._cached_bytecode(str(source)) is None
    py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH, doraise=True)
    assert bootstrap._cached_bytecode(str(source)) is None  # hash-checked: not read here
    os.remove(source.with_name("__pycache__") / os.listdir(source.with_name("__pycache__"))[0])
    assert bootstrap._cached_bytecode(str(source)) is None
