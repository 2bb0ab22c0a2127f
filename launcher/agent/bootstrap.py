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
import marshal
import os
import shlex
import zlib
from pathlib import Path
from typing import Any

from launcher.agent import spare

BOOTSTRAP = """#tflaunch host agent (its code follows on standard input)
import sys,zlib,base64,types,marshal
b=marshal.loads(zlib.decompress(base64.b64decode(sys.stdin.buffer.readline())))
c=b['code'] if b['magic']==getattr(sys.modules.get('_frozen_importlib_external'),'MAGIC_NUMBER',0) else 0
for n,s in b['modules']:
 q=n.split('.')
 for i in range(1,len(q)):
  p='.'.join(q[:i])
  if p not in sys.modules:
   m=types.ModuleType(p);m.__path__=[];sys.modules[p]=m
 m=types.ModuleType(n);m.__file__='<tflaunch>/'+n.replace('.','/')+'.py';sys.modules[n]=m
 if len(q)>1:setattr(sys.modules['.'.join(q[:-1])],q[-1],m)
 exec(marshal.loads(c[n]) if c and n in c else compile(s,m.__file__,'exec'),m.__dict__)
sys.exit(sys.modules[b['main']].main(b['settings']))
"""
MAIN = "launcher.agent.main"
# In dependency order: each module is run once the ones it imports are registered.
MODULES = (
    "worker.contract",
    "launcher.agent.frames",
    "launcher.agent.cluster",
    "launcher.agent.safe_paths",
    "launcher.agent.module_names",
    "launcher.agent.netns",
    "launcher.agent.spawn",
    "launcher.agent.protocol",
    "launcher.agent.host_python",
    "launcher.agent.network",
    "launcher.agent.probe",
    "launcher.agent.keeper",
    "launcher.agent.scratch",
    "launcher.agent.oom",
    "launcher.agent.adoption",
    "launcher.agent.processes",
    "launcher.agent.stacks",
    "launcher.agent.usage",
    "launcher.agent.standby",
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
def _codes() -> dict[str, bytes]:
    """The modules' bytecode as this python cached it (their `__pycache__` files, when they match
    the sources), for an agent whose python reads this python's bytecode (the same magic number):
    compiling them there took a quarter of its start-up, on every host of a fleet. Reading them
    costs the launcher nothing it would notice; a module without a fresh cache, or another python,
    is compiled by the agent from the source sent beside it, as before."""
    found = {}
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        code = _cached_bytecode(spec.origin) if spec is not None and spec.origin else None
        if code is not None:
            found[name] = code
    return found


def _cached_bytecode(source: str) -> bytes | None:
    """The marshalled code in `source`'s timestamp-checked .pyc, when it is this python's and fresh."""
    try:
        info = os.stat(source)
        with open(importlib.util.cache_from_source(source), "rb") as handle:
            data = handle.read()
    except (OSError, NotImplementedError, ValueError):  # none, or no cache for this python
        return None
    header = [int.from_bytes(data[at : at + 4], "little") for at in (4, 8, 12)]
    fresh = header == [0, int(info.st_mtime) & 0xFFFFFFFF, info.st_size & 0xFFFFFFFF]  # 0: not hash-based
    return data[16:] if data[:4] == importlib.util.MAGIC_NUMBER and fresh else None


@functools.cache
def _spare_code() -> dict[str, str]:
    return {"source": Path(str(spare.__file__)).read_text(encoding="utf-8"), "bootstrap": spare.SPARE_BOOTSTRAP}


def agent_line(
    liveness_s: float | None, watch_silence: bool = True, addressed: bool = False, remote: bool = True
) -> bytes:
    """The first line an agent reads: its modules, their bytecode and its settings. `watch_silence`:
    the agent ends itself after liveness_s without a line (remote hosts); `addressed`: under Slurm,
    commands may name the agent they are for by its SLURM_PROCID; `remote`: the line crosses a
    network, so it is compressed (level 1: half the time of the default level for 12% more bytes); a
    local pipe gets it stored, where bytes cost nothing and packing them cost the launcher ~4 ms on
    its way to its first task. The bytecode spares each agent compiling its modules (~30 ms of CPU,
    on the host's own cores, and before it can answer)."""
    return _line(liveness_s, watch_silence, addressed, remote)


@functools.cache  # one launch asks for the same line more than once (the local agent started early, then opened)
def _line(liveness_s: float | None, watch_silence: bool, addressed: bool, remote: bool) -> bytes:
    settings: dict[str, Any] = {
        "liveness_s": liveness_s,
        "watch_silence": watch_silence,
        "addressed": addressed,
        "spare": _spare_code(),
    }
    # marshal's format for plain values (str, bytes, dicts, lists, numbers) is read alike by every
    # python 3; only the compiled code inside it is this python's own, and used only by the same
    bundle = marshal.dumps(
        {
            "modules": _sources(),
            "code": _codes(),
            "magic": importlib.util.MAGIC_NUMBER,
            "main": MAIN,
            "settings": settings,
        },
        4,
    )
    return base64.b64encode(zlib.compress(bundle, 1 if remote else 0)) + b"\n"
