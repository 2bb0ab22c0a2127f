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
import hashlib
import importlib.util
import marshal
import os
import shlex
import zlib
from pathlib import Path
from typing import Any

from launcher.agent import spare

BOOTSTRAP = """#tflaunch host agent (its code follows on standard input, or is in this user's cache by its hash)
import sys,os,zlib,binascii,types,marshal
l=sys.stdin.buffer.readline();s=0
if l[:1]==b'H':
 try:from _sha256 import sha256 as H
 except ImportError:
  try:from _sha2 import sha256 as H
  except ImportError:from hashlib import sha256 as H
 h,s=l[1:].split();h=h.decode();z=0;d=os.path.expanduser('~/.cache/tflaunch/agent');f=os.path.join(d,h)
 def p(q):
  t=os.lstat(q);return t.st_uid==os.geteuid() and t.st_mode&0o177077==0o40000
 try:
  for q in(d[:-15],d[:-6],d):
   if not os.path.isdir(q):os.mkdir(q,0o700)
  k=(p(d[:-6]) and p(d)) or 0
  if k:
   k=os.open(f,os.O_RDONLY|os.O_NOFOLLOW);t=os.fstat(k);z=os.fdopen(k,'rb').read()
   if t.st_uid!=os.geteuid() or t.st_mode&0o022 or H(z).hexdigest()!=h:z=0
 except OSError:pass
 if not z:
  sys.stdout.write('\\n%s\\n'%'#tflaunch-agent-needs-its-code');sys.stdout.flush()
  z=binascii.a2b_base64(sys.stdin.buffer.readline())
  try:
   if H(z).hexdigest()==h and p(d[:-6]) and p(d):
    w=f+'.%d'%os.getpid();k=os.open(w,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600);os.write(k,z);os.close(k);os.rename(w,f)
  except OSError:pass
 l=z
else:l=binascii.a2b_base64(l)
b=marshal.loads(zlib.decompress(l))
if s:b['settings'].update(marshal.loads(binascii.a2b_base64(s)))
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
 if n==b.get('first'):b['settings']['keeper']=m.start()
g=b['settings'];n=b['main'];b=c=l=z=s=0
sys.exit(sys.modules[n].main(g))
"""
REMOTE_LEVEL = 6  # zlib's level for a line that crosses a network
NEEDS_CODE = b"#tflaunch-agent-needs-its-code"  # what the bootstrap says when its cache has not the code asked
MAIN = "launcher.agent.main"
# Run first, and its `start()` called at once (the keeper's fork): launcher/agent/keeper.py says why.
FIRST = "launcher.agent.keeper"
# In dependency order: each module is run once the ones it imports are registered.
MODULES = (
    FIRST,
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
    "launcher.agent.processes",
    "launcher.agent.probe",
    "launcher.agent.scratch",
    "launcher.agent.oom",
    "launcher.agent.adoption",
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
    network, so it is compressed (level 6: 12 ms of the launcher's, once a launch, for 12% fewer
    bytes than level 1, which every node of a Slurm step reads); a local pipe gets it stored, where
    bytes cost nothing and packing them cost the launcher ~4 ms on its way to its first task. The
    bytecode spares each agent compiling its modules (~30 ms of CPU, on the host's own cores, and
    before it can answer)."""
    return _line(liveness_s, watch_silence, addressed, remote)


@functools.cache  # one launch asks for the same line more than once (the local agent started early, then opened)
def _line(liveness_s: float | None, watch_silence: bool, addressed: bool, remote: bool) -> bytes:
    payload = _payload(REMOTE_LEVEL if remote else 0, _settings(liveness_s, watch_silence, addressed))
    return base64.b64encode(payload) + b"\n"


def _settings(liveness_s: float | None, watch_silence: bool, addressed: bool) -> dict[str, Any]:
    return {"liveness_s": liveness_s, "watch_silence": watch_silence, "addressed": addressed}


def _payload(level: int, settings: dict[str, Any] | None = None) -> bytes:
    """The agent's code (its modules, their bytecode, the spares' code), compressed; with `settings`, the
    whole first line's content, else what a host caches by its hash."""
    # marshal's format for plain values (str, bytes, dicts, lists, numbers) is read alike by every
    # python 3; only the compiled code inside it is this python's own, and used only by the same
    bundle = marshal.dumps(
        {
            "modules": _sources(),
            "code": _codes(),
            "magic": importlib.util.MAGIC_NUMBER,
            "main": MAIN,
            "first": FIRST,
            "settings": {"spare": _spare_code(), **(settings or {})},
        },
        4,
    )
    return zlib.compress(bundle, level)


@functools.cache
def _code() -> bytes:
    return _payload(REMOTE_LEVEL)


def cached_agent_lines(liveness_s: float, watch_silence: bool = True, addressed: bool = False) -> tuple[bytes, bytes]:
    """For a remote host, (the first line, the code line): the first names the agent's code by its hash, with
    the launch's settings; the host runs it from this user's cache there when it holds that code (created
    0700, verified by hash, never trusted when another user owns it or may write to it), and otherwise says
    NEEDS_CODE and reads the code line, which it then caches. ~200 KiB a host and a launch become ~100 bytes."""
    code = _code()
    settings = base64.b64encode(marshal.dumps(_settings(liveness_s, watch_silence, addressed), 4))
    first = b"H" + hashlib.sha256(code).hexdigest().encode() + b" " + settings + b"\n"
    return first, base64.b64encode(code) + b"\n"
