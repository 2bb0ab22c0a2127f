"""Scale and bounds on one machine: many tasks, one endless line, the launcher's fixed cost.

- many: 1,000 trivial local tasks (`python -c pass`, 4 local hosts x 250, one agent each) under
  `launch`, against the same 1,000 processes started by hand from one script. Target: <= 1.15x.
- line: one task writes a single 256 MiB line, to its output or to its event channel; the
  launcher's own peak RSS (VmHWM of the `launch` process, not of the task). Target: < 100 MiB.
- fixed: a trivial 2-task local launch against the same 2 processes started by hand. Target:
  <= +0.2 s.
All side by side, each first in turn (A B, B A, ...).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import interleaved, save, summarize, table, workdir

PASS = ["python", "-c", "pass"]
HOSTS = 4
PER_HOST = 250
LINE_BYTES = 256 << 20
MANY_RATIO = 1.15  # 1,000 tasks: launch / by hand, median
FIXED_S = 0.2  # a 2-task launch: seconds over by hand, median
LINE_MIB = 100.0  # the launcher's peak RSS with a 256 MiB line


def _launch(spec: dict[str, Any], *extra: str, watch_memory: bool = False) -> tuple[float, float]:
    """Wall time of `launch` for `spec` and, with `watch_memory`, its own peak RSS in MiB."""
    directory = workdir("scale")
    spec = {**spec, "run_root": str(directory / "runs")}
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "launcher", "--cluster", str(path), "--quiet", *extra],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = [0.0]
    if watch_memory:
        threading.Thread(target=_watch_peak, args=(proc, peak), daemon=True).start()
    code = proc.wait()
    elapsed = time.monotonic() - started
    shutil.rmtree(directory, ignore_errors=True)
    assert code == 0, f"launch exited {code}"
    return elapsed, peak[0]


def _watch_peak(proc: subprocess.Popen[bytes], peak: list[float]) -> None:
    """The process's own high-water mark (VmHWM), read until it exits."""
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]) / 1024)
        except OSError:  # exited meanwhile
            return
        time.sleep(0.02)


def _by_hand(count: int, argv: list[str]) -> float:
    """`count` copies of `argv` started from one script (the launcher's python, as launch uses)."""
    script = (
        "import subprocess, sys\n"
        f"procs = [subprocess.Popen({json.dumps([sys.executable, *argv[1:]])}) for _ in range({count})]\n"
        "sys.exit(max(p.wait() for p in procs))\n"
    )
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", script], check=True)
    return time.monotonic() - started


def _many_spec() -> dict[str, Any]:
    hosts = [{"address": "localhost", "workers": PER_HOST}]
    hosts += [{"address": f"127.0.0.{i}", "transport": "local", "workers": PER_HOST} for i in range(2, HOSTS + 1)]
    return {"name": "many", "hosts": hosts, "training": {"kind": "command", "argv": PASS}}


def _line_spec(where: str) -> dict[str, Any]:
    if where == "output":
        code = f"import sys; sys.stdout.buffer.write(b'x' * {LINE_BYTES} + b'\\n')"
    else:
        code = (
            "import os; fd = int(os.environ['TFLAUNCH_EVENT_FD']);"
            f'os.write(fd, b\'{{"event": "step", "pad": "\' + b\'x\' * {LINE_BYTES} + b\'"}}\\n\')'
        )
    return {
        "name": f"line-{where}",
        "hosts": [{"address": "localhost", "workers": 1}],
        "training": {"kind": "command", "argv": ["python", "-c", code]},
    }


def run(quick: bool) -> str:
    pairs_many, pairs_fixed = (1, 5) if quick else (3, 10)
    many_launch, many_hand, many_ratio = interleaved(
        lambda: _launch(_many_spec())[0], lambda: _by_hand(HOSTS * PER_HOST, PASS), pairs_many
    )
    fixed_spec = {
        "name": "fixed",
        "hosts": [{"address": "localhost", "workers": 2}],
        "training": {"kind": "command", "argv": PASS},
    }
    fixed_launch, fixed_hand, _ = interleaved(lambda: _launch(fixed_spec)[0], lambda: _by_hand(2, PASS), pairs_fixed)
    extra = [a - b for a, b in zip(fixed_launch, fixed_hand, strict=True)]
    peaks = {where: _launch(_line_spec(where), watch_memory=True)[1] for where in ("output", "event")}
    data = {
        "many": {"launch_s": many_launch, "by_hand_s": many_hand, "ratio": many_ratio, "tasks": HOSTS * PER_HOST},
        "fixed": {"launch_s": fixed_launch, "by_hand_s": fixed_hand, "extra_s": extra},
        "line_peak_rss_mib": peaks,
    }
    save("scale", data, quick)
    many = summarize(many_ratio)
    fixed = summarize(extra)
    rows = [
        ("1,000 tasks: launch", summarize(many_launch), "s"),
        ("1,000 tasks: by hand", summarize(many_hand), "s"),
        (f"1,000 tasks: ratio (target <= {MANY_RATIO:g})", many, "x"),
        ("2 tasks: launch", summarize(fixed_launch), "s"),
        ("2 tasks: by hand", summarize(fixed_hand), "s"),
        (f"2 tasks: fixed cost (target <= +{FIXED_S:g})", fixed, "s"),
        (f"256 MiB output line: launcher peak RSS (target < {LINE_MIB:g})", summarize([peaks["output"]]), "MiB"),
        (f"256 MiB event line: launcher peak RSS (target < {LINE_MIB:g})", summarize([peaks["event"]]), "MiB"),
    ]
    verdicts = [
        f"many tasks: {'met' if many['median'] <= MANY_RATIO else 'missed'}",
        f"fixed cost: {'met' if fixed['median'] <= FIXED_S else 'missed'}",
        f"long lines: {'met' if max(peaks.values()) < LINE_MIB else 'missed'}",
    ]
    return table("Scale and bounds (one machine)", rows) + "\n\n" + "; ".join(verdicts)
