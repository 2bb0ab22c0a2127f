"""Start the host agent through one fixed command, whatever the channel (launcher side).

The command line is always `PYTHON -I -S -u -c BOOTSTRAP`: isolated from the working directory
and the environment's PYTHON* variables, without site. A bare PYTHON (`python3`) is found on the
host's PATH by the shell, by execvp or by srun. The first line on standard input is the agent
itself: the sources of its modules (the contract, `worker/contract.py`, shipped as it is rather
than mirrored) and its settings, compressed; the bootstrap registers each as a module under its
own name and runs `launcher.agent.main`. So nothing from the spec but the python path reaches a
command line, and that is shell-quoted.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import shlex
import zlib
from pathlib import Path
from typing import Any

from launcher.agent import spare

BOOTSTRAP = """import sys,json,zlib,base64,types
b=json.loads(zlib.decompress(base64.b64decode(sys.stdin.buffer.readline())))
for n,s in b['modules']:
 q=n.split('.')
 for i in range(1,len(q)):
  p='.'.join(q[:i])
  if p not in sys.modules:
   m=types.ModuleType(p);m.__path__=[];sys.modules[p]=m
 m=types.ModuleType(n);m.__file__='<tflaunch>/'+n.replace('.','/')+'.py';sys.modules[n]=m
 if len(q)>1:setattr(sys.modules['.'.join(q[:-1])],q[-1],m)
 exec(compile(s,m.__file__,'exec'),m.__dict__)
sys.exit(sys.modules[b['main']].main(b['settings']))
"""
MAIN = "launcher.agent.main"
# In dependency order: each module is run once the ones it imports are registered.
MODULES = (
    "worker.contract",
    "launcher.agent.frames",
    "launcher.agent.cluster",
    "launcher.agent.safe_paths",
    "launcher.agent.probe",
    "launcher.agent.tasks",
    MAIN,
)


def agent_argv(python: str) -> list[str]:
    return [python, "-I", "-S", "-u", "-c", BOOTSTRAP]


def remote_command(python: str) -> str:
    """`agent_argv` as one shell-quoted command line (what an SSH session runs)."""
    return " ".join(shlex.quote(part) for part in agent_argv(python))


@functools.cache
def _sources() -> tuple[tuple[str, str], ...]:
    found = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        found.append((name, Path(spec.origin).read_text(encoding="utf-8")))
    return tuple(found)


@functools.cache
def _spare_code() -> dict[str, str]:
    return {"source": Path(str(spare.__file__)).read_text(encoding="utf-8"), "bootstrap": spare.SPARE_BOOTSTRAP}


def agent_line(liveness_s: float | None, watch_silence: bool = True, addressed: bool = False) -> bytes:
    """The first line an agent reads: its modules and settings. `watch_silence`: the agent ends
    itself after liveness_s without a line (remote hosts); `addressed`: under Slurm, commands may
    name the agent they are for by its SLURM_PROCID."""
    settings: dict[str, Any] = {
        "liveness_s": liveness_s,
        "watch_silence": watch_silence,
        "addressed": addressed,
        "spare": _spare_code(),
    }
    bundle = json.dumps({"modules": _sources(), "main": MAIN, "settings": settings}).encode()
    return base64.b64encode(zlib.compress(bundle, 6)) + b"\n"
