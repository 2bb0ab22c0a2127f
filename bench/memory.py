"""Memory: peak RSS of the launcher process itself during 3-worker runs, with normal training logs
and with tasks that flood their output. For scale, the peak RSS of one TensorFlow worker.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time

import psutil

from bench.common import builtin_spec, save, table, workdir, write_spec

LAUNCHER_MIB = 100.0  # the launcher's peak RSS in either run: tens of MiB

FLOOD = "import sys\nfor i in range({n}):\n    sys.stdout.write(f'line {{i}} ' + 'x' * 100 + '\\n')\n"


def _peak(cmd: list[str], cwd: str) -> tuple[float, float, float]:
    """(launcher peak MiB, largest task peak MiB, seconds)."""
    import subprocess

    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    launcher = psutil.Process(proc.pid)
    peaks = {"launcher": 0.0, "task": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                peaks["launcher"] = max(peaks["launcher"], launcher.memory_info().rss / 2**20)
                for child in launcher.children(recursive=True):
                    peaks["task"] = max(peaks["task"], child.memory_info().rss / 2**20)
            except psutil.NoSuchProcess:  # a task ended between listing and reading
                pass
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    code = proc.wait()
    done.set()
    thread.join()
    assert code == 0, f"launch exited {code}"
    return peaks["launcher"], peaks["task"], time.monotonic() - started


def run(quick: bool) -> str:
    directory = workdir("mem")
    spec = builtin_spec("mem", 3, directory / "runs", steps=100 if quick else 600, checkpoint_every=100, log_every=1)
    path = write_spec(directory, spec)
    train = _peak([sys.executable, "-m", "launcher", "--cluster", str(path)], str(directory))
    lines = 50_000 if quick else 400_000
    (directory / "flood.py").write_text(FLOOD.format(n=lines))
    flood = _peak(
        [
            sys.executable,
            "-m",
            "launcher",
            "--local",
            "3",
            "--name",
            "flood",
            "--run-root",
            str(directory / "runs"),
            "--",
            "python",
            str(directory / "flood.py"),
        ],
        str(directory),
    )
    shutil.rmtree(directory, ignore_errors=True)
    save(
        "memory",
        {
            "training": {"launcher_mb": train[0], "task_mb": train[1], "seconds": train[2]},
            "flood": {"lines_per_task": lines, "launcher_mb": flood[0], "task_mb": flood[1], "seconds": flood[2]},
        },
        quick,
    )
    one = lambda v: {"median": v, "min": v, "max": v, "n": 1}  # noqa: E731
    return table(
        f"Memory: peak RSS of the launcher process during 3-task runs, output echoed to the console (target < "
        f"{LAUNCHER_MIB:g} MiB)",
        [
            ("launcher, 3 TF workers logging every step", one(train[0]), "MiB"),
            ("one TF worker, for scale", one(train[1]), "MiB"),
            (f"launcher, 3 tasks printing {lines} lines each", one(flood[0]), "MiB"),
        ],
    )
