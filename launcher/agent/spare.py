"""A warm spare: an interpreter that imports TensorFlow ahead of time, then becomes one task.

The host agent (launcher/agent/tasks.py) starts it while the current attempt still runs, with
that task's environment, as `python -c SPARE_BOOTSTRAP ORDERS_FD READY_FD`. The agent writes
this file's source and the list of modules to preload on the orders pipe. The spare imports
them in a thread of the lowest CPU priority (SCHED_IDLE: it runs only on CPU time the training
gang leaves unused, so standing by costs the workers nothing), says so on the ready pipe, and
waits for its one order: the next attempt's argv, environment and working directory. It
acknowledges the order on the ready pipe (`{"took": true}`) before anything else, then becomes
the task as `python script.py ARGS` or `python -m module ARGS` would start it: the same
sys.argv and sys.path[0], the script run with runpy as `__main__`. Only the preloading thread
is lowered: the task runs on the main thread, whose priority was never touched (an unprivileged
process could not raise it back).

Nothing in the working directory (the task's, a user's project) is imported by the spare itself:
`-c` puts that directory first on sys.path and the bootstrap takes it off before any import, and
what runpy would import late is loaded ahead. Only the task, once started, sees its own sys.path.

It must never build a TF op or touch a device before its order: TensorFlow must first see the
order's TF_CONFIG and CUDA_VISIBLE_DEVICES (importing TensorFlow does neither). A spare runs one
task at most: a process that ever built a strategy is never reused. Standard library only up to
the preload: the source travels to remote hosts over the agent's channel.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import threading
import time
from typing import IO, Any

# `python -c` this with the orders and ready pipes' numbers: runs the source sent as line one.
SPARE_BOOTSTRAP = (
    "#tflaunch warm spare\n"  # what `ps` shows first
    "import sys\nif sys.path and sys.path[0]=='':del sys.path[0]\n"  # nothing from the working directory
    "import os,json;f=os.fdopen(int(sys.argv[1]),'r');src=json.loads(f.readline());"
    "g={'__name__':'tflaunch_spare','ORDERS':f};exec(compile(src,'tflaunch_spare','exec'),g)"
)
PRELOAD_NICE = 19  # where SCHED_IDLE is not to be had: the lowest nice value instead
RUNTIME_MODULE = "worker"  # launcher.plan.WORKER_MODULE (this source travels alone: no import of it)

# runpy.run_path imports pkgutil only when called, when the task's directory already leads sys.path
# (a pkgutil.py beside the script would stand in for it): load it while nothing there can be found.
__import__("pkgutil")


def lower_this_thread() -> str:
    """Put the calling thread (only it) at the lowest CPU priority; says which it got."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (AttributeError, OSError):  # not Linux, or refused: a nice value is the next best
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, PRELOAD_NICE)
        return f"nice {PRELOAD_NICE}"
    except (AttributeError, OSError):  # no per-thread priority here: preload at normal priority
        return "normal"


def raise_thread(thread: threading.Thread) -> None:
    """Back to normal priority: allowed to root and CAP_SYS_NICE only. Where it is refused the import
    goes on at idle priority, which still takes every CPU the host does not otherwise use."""
    if thread.native_id is None:
        return
    try:
        os.sched_setscheduler(thread.native_id, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, thread.native_id, 0)
    except (AttributeError, OSError):  # unprivileged: see above
        pass


def _preload(modules: list[str], outcome: dict[str, Any]) -> None:
    outcome["priority"] = lower_this_thread()
    started = time.monotonic()
    failed = []
    for name in modules:
        try:
            __import__(name)
        except Exception as error:  # a module that does not import only makes the spare less warm
            failed.append(f"{name}: {type(error).__name__}: {error}")
    # What was imported lives as long as the task: out of the collector's way. Its first full
    # collection would otherwise scan all of TensorFlow's objects (0.12 s) while the task joins.
    # (Taken back for a user's script: see keeps_frozen.)
    gc.collect()
    gc.freeze()
    outcome.update(ready=True, import_s=round(time.monotonic() - started, 3), failed=failed)


def _say(fd: int, message: dict[str, Any]) -> None:
    try:
        os.write(fd, (json.dumps(message) + "\n").encode())
    except OSError:  # the agent is gone; the orders pipe tells us too
        pass


def keeps_frozen(argv: list[str]) -> bool:
    """Whether the task may keep the preload frozen out of the collector: the built-in runtime only
    (`python [-P] -m worker`, launcher.plan's WORKER_MODULE). A user's script gets the heap a cold
    start would give it (`gc.get_objects()`, `gc.get_referrers()` and collection as usual)."""
    args = [a for a in argv[1:] if a != "-P"]
    return args[:2] == ["-m", RUNTIME_MODULE]


def become(order: dict[str, Any]) -> None:
    """Turn this interpreter into the ordered task and run it (returns when the script does)."""
    if not keeps_frozen(order["argv"]):
        gc.unfreeze()
    os.environ.clear()
    os.environ.update(order["env"])
    if order.get("cwd"):
        os.chdir(os.path.expanduser(order["cwd"]))
    args = list(order["argv"][1:])
    safe_path = args[0] == "-P"  # as `python -P`: the working directory is not put on sys.path
    if safe_path:
        args.pop(0)
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]  # run_module puts the module's file in argv[0]
        if not safe_path:
            sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")


def spare_main(orders: IO[str], ready_fd: int) -> None:
    if sys.path and sys.path[0] == "":  # `-c` puts the working directory first; the task sets its own
        sys.path.pop(0)
    modules = json.loads(orders.readline())["preload"]
    outcome: dict[str, Any] = {}
    loader = threading.Thread(target=_preload, args=(modules, outcome), daemon=True, name="preload")
    loader.start()

    def tell_when_ready() -> None:
        loader.join()
        _say(ready_fd, outcome)

    waiting = threading.Thread(target=tell_when_ready, daemon=True, name="ready")
    waiting.start()
    line = orders.readline()
    orders.close()
    if not line:  # the agent is gone, or it discarded us: leave quietly
        os._exit(0)
    _say(ready_fd, {"took": True})  # the agent hands the task over only once it hears this
    if loader.is_alive():  # still importing: the task waits for it, so it must not wait at idle priority
        raise_thread(loader)
    loader.join()
    waiting.join()
    os.close(ready_fd)
    become(json.loads(line))


if __name__ == "tflaunch_spare":
    spare_main(globals()["ORDERS"], int(sys.argv[2]))
