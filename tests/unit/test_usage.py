"""Each task's CPU, memory and GPU use as its agent samples them, and as the live view and `launch status` show them."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launcher.agent.usage import Sampler, by_group, gpu_of
from launcher.common.usage_text import usage_text
from launcher.console import Console, TaskView
from launcher.rundir.status import _task_rows

# nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits, and
# --query-gpu=uuid,utilization.gpu, as an 8-GPU host prints them (recorded; no GPU runs here)
APPS = """4101, GPU-aaaa, 30512
4102, GPU-bbbb, 30498
4102, GPU-cccc, 1024
5000, GPU-dddd, 70000
"""
GPUS = """GPU-aaaa, 97
GPU-bbbb, 12
GPU-cccc, 88
GPU-dddd, 100
"""


def rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines()]


def test_gpu_use_is_summed_per_task_and_takes_its_busiest_gpu() -> None:
    found = gpu_of({4100: [4100, 4101], 4102: [4102]}, rows(APPS), rows(GPUS))
    assert found == {4100: {"gpu_mem": 30512 * 2**20, "gpu": 97}, 4102: {"gpu_mem": (30498 + 1024) * 2**20, "gpu": 88}}
    assert gpu_of({1: [1]}, [["x", "y"], ["1", "GPU-a", "[N/A]"]], [["GPU-a", "[N/A]"]]) == {}


def started(code: str) -> subprocess.Popen[bytes]:
    """A python running `code` once it said it runs (a process sampled before its exec has no memory yet)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"print('up', flush=True)\n{code}"], process_group=0, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


def test_a_busy_task_shows_a_core_and_an_idle_one_none() -> None:
    busy = started("while True: pass")
    idle = started("import time; time.sleep(60)")
    try:
        sampler = Sampler()
        first = sampler.sample({1: busy.pid, 2: idle.pid})
        assert first["1"]["cpu"] is None and first["1"]["rss"] > 1_000_000
        time.sleep(1.0)  # the interval the CPU use is measured over
        second = sampler.sample({1: busy.pid, 2: idle.pid})
        assert second["1"]["cpu"] > 50 and second["2"]["cpu"] < 10, second
        assert set(by_group({busy.pid})) == {busy.pid}
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
    assert busy.poll() is not None and idle.poll() is not None
    assert Sampler().sample({1: busy.pid}) == {}  # gone: nothing to say
    assert os.getpid()


def test_the_cells_show_numbers_only() -> None:
    assert usage_text({"cpu": 97.4, "rss": 1.5 * 2**30}) == ("97%", "1.5 GiB")
    assert usage_text({"cpu": 12, "rss": 300 * 2**20, "gpu": 88, "gpu_mem": 30 * 2**30}) == (
        "12% gpu 88%",
        "300 MiB gpu 30.0 GiB",
    )
    assert usage_text({"cpu": "\x1b[2J", "rss": True, "gpu": float("nan"), "gpu_mem": -1}) == ("", "")
    view = TaskView("worker:0")
    view.saw_usage({"cpu": 50.0, "rss": "lots", "event": "usage"})
    assert view.usage == {"cpu": 50.0, "rss": None, "gpu": None, "gpu_mem": None}


def test_launch_status_shows_cpu_and_memory_columns_only_when_known() -> None:
    known = _task_rows(({"task": "worker:0", "state": "running", "cpu_percent": 99.0, "rss_bytes": 2**30},))
    assert "cpu" in known[0] and "99%" in known[1] and "1.0 GiB" in known[1]
    unknown = _task_rows(({"task": "worker:0", "state": "running"},))
    assert "cpu" not in unknown[0]


def test_the_live_view_and_the_status_file_show_what_the_agent_sampled(tmp_path: Path) -> None:
    from tests.unit.test_console import PLAN, status

    console = Console(live=False, out=io.StringIO(), err=io.StringIO())
    console.attach(status, str(tmp_path / "status.json"))
    for launch in PLAN.tasks:
        console.report(launch, {"event": "joined"})
    assert "cpu" not in console.rows()[0], "no column before a sample"
    console.report(PLAN.tasks[0], {"event": "usage", "cpu": 99.6, "rss": 700 * 2**20})
    header, first, second = console.rows()
    assert first[header.index("cpu")] == "100%" and first[header.index("mem")] == "700 MiB"
    assert second[header.index("cpu")] == ""
    console.close()
    written = json.loads((tmp_path / "status.json").read_text())["tasks"][0]
    assert written["cpu_percent"] == 99.6 and written["rss_bytes"] == 700 * 2**20


def test_a_task_that_stopped_stepping_shows_it_without_a_stale_rate_or_eta() -> None:
    view = TaskView("worker:1", state="running", total=100)
    view.saw_step(10, 100.0)
    view.saw_step(20, 105.0)  # 2 steps a second
    assert view.shown(109.0) == ("running", 2.0, 40.0)
    assert view.shown(115.5) == ("running, no step for 10s", None, None)
    starting = TaskView("worker:0")
    starting.milestone = "imported"
    assert starting.shown(0.0)[0] == "starting (imported)"
