"""The agent's first line: its modules compiled by the launcher's python, used by an agent whose
python reads that bytecode, and compiled from their sources by any other."""

from __future__ import annotations

import base64
import marshal
import subprocess
import sys
import zlib
from collections.abc import Callable
from typing import Any

from launcher.agent.bootstrap import MAIN, agent_argv, agent_line


def _line(change: Callable[[dict[str, Any]], None]) -> bytes:
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
    code, out = _run(_line(_main_source_exits_7))  # the source says exit 7; the bytecode is the agent
    assert code == 0 and b'"event": "ready"' in out, (code, out)


def test_an_agent_of_another_python_compiles_the_sources() -> None:
    def another_python(bundle: dict[str, Any]) -> None:
        _main_source_exits_7(bundle)
        bundle["magic"] = b"\x00\x00\r\n"  # no python's bytecode

    code, out = _run(_line(another_python))
    assert code == 7, (code, out)
    code, out = _run(_line(lambda bundle: bundle.update(magic=b"\x00\x00\r\n")))  # the real sources run as well
    assert code == 0 and b'"event": "ready"' in out, (code, out)
