"""Silent failures on hosts that are real hosts: network namespaces with their own addresses and sshd.

A partition here is an iptables DROP inside one namespace: no FIN, no RST, no ICMP, the way a dead
switch port or a firewall looks from both ends. Each test ends with no task process left in any
namespace (the `lab` fixture checks, after healing every rule).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import launch_cmd, launcher_traceback, run_launch, write_spec
from tests.integration.test_ssh import ssh_spec
from tests.integration.test_train_local import assert_agree, results
from tests.labs.netns import NetnsHost, NetnsLab
from tests.labs.ports import free_port
from tests.labs.waiting import wait_for_text

pytestmark = pytest.mark.tf


def lab_spec(
    lab: NetnsLab, work: Path, name: str, ssh: dict[str, Any] | None = None, **training: Any
) -> dict[str, Any]:
    hosts = [
        {"address": host.address, "ports": [free_port()], "ssh": lab.ssh_settings(**(ssh or {}))} for host in lab.hosts
    ]
    return ssh_spec(work, name, hosts, **{"steps": 100000, "checkpoint_every": 10000, **training})


@contextmanager
def launched(work: Path, spec: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`launch` running in the background with its output in a file; killed on the way out if still running."""
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_tasks_gone(hosts: list[NetnsHost], deadline: float) -> list[str]:
    """Poll until no task process is left on `hosts`; what is still alive at `deadline`."""
    while True:
        alive = [f"{h.address}: {cmd}" for h in hosts for cmd in h.tasks_alive()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_silent_partition_with_default_settings_loses_the_host_and_its_tasks_stop(lab: NetnsLab, work: Path) -> None:
    healthy, cut = lab.hosts
    with launched(work, lab_spec(lab, work, "partition")) as (proc, log):
        wait_for_text(log, "step 20/", 120, lambda: proc.poll() is None)
        assert cut.tasks_alive(), "the worker should be running in the partitioned host's namespace"
        lab.partition(cut)
        cut_at = time.monotonic()
        code = proc.wait(timeout=60)
        reported_s = time.monotonic() - cut_at
        left = wait_tasks_gone([cut], cut_at + 15 + 2)  # default ssh.liveness_timeout_s is 15
        tasks_gone_s = time.monotonic() - cut_at
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert f"nothing from {cut.address}" in text and "liveness_timeout_s=15" in text, text[-3000:]
    assert not launcher_traceback(text), text[-3000:]
    print(f"partition: launcher exited {reported_s:.1f}s after the cut; tasks gone after {tasks_gone_s:.1f}s")
    assert reported_s < 15 + 6, f"the launcher took {reported_s:.1f}s to give the host up"
    assert not left, f"still running on the partitioned host {tasks_gone_s:.1f}s after the cut: {left}"
    assert not wait_tasks_gone([healthy], time.monotonic() + 10)
    summary = json.loads((work / "runs" / "partition" / "summary.json").read_text())
    assert cut.address in summary["attempts"][0]["reason"]


def test_partition_that_heals_after_the_gang_restarted_without_it(lab: NetnsLab, work: Path) -> None:
    cut = lab.hosts[1]
    spec = lab_spec(lab, work, "heal", ssh={"liveness_timeout_s": 3, "connect_timeout_s": 2}, steps=200)
    spec["training"]["checkpoint_every"] = 20
    spec["restart"].update({"max_restarts": 6, "backoff_s": 1})
    with launched(work, spec) as (proc, log):
        wait_for_text(log, "step 40/", 120, lambda: proc.poll() is None)
        lab.partition(cut)
        wait_for_text(
            log, f"cannot start: {cut.address}", 60, lambda: proc.poll() is None
        )  # a restart could not reach it
        lab.heal()
        code = proc.wait(timeout=240)
    text = log.read_text()
    assert code == 0, text[-3000:]
    summary = json.loads((work / "runs" / "heal" / "summary.json").read_text())
    last = len(summary["attempts"]) - 1
    assert last >= 2, "expected the lost attempt, at least one that could not reach the host, then success"
    assert any(f"nothing from {cut.address}" in a["reason"] for a in summary["attempts"][:-1])
    found = results(work / "runs" / "heal", last)
    assert_agree(found, 2, 200)
    assert min(r["start_step"] for r in found.values()) >= 40, "the healed run resumed from a checkpoint"


def test_preflight_names_the_pair_when_a_task_port_is_firewalled(lab: NetnsLab, work: Path) -> None:
    spec = lab_spec(lab, work, "mesh")
    blocked = spec["hosts"][1]["ports"][0]
    lab.drop(lab.hosts[1], "-p", "tcp", "--dport", str(blocked))
    started = time.monotonic()
    proc = run_launch(["--cluster", str(write_spec(work, spec)), "--check"], work, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    expected = f"{lab.hosts[0].address}: cannot open a TCP connection to task address {lab.hosts[1].address}:{blocked}"
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 20


def test_launcher_partitioned_from_every_worker(lab: NetnsLab, work: Path) -> None:
    with launched(work, lab_spec(lab, work, "island", ssh={"liveness_timeout_s": 3})) as (proc, log):
        wait_for_text(log, "step 20/", 120, lambda: proc.poll() is None)
        for host in lab.hosts:
            lab.partition_from_launcher(host)  # the workers still reach each other
        cut_at = time.monotonic()
        code = proc.wait(timeout=60)
        left = wait_tasks_gone(lab.hosts, cut_at + 3 + 2)
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert not launcher_traceback(text), text[-3000:]
    for host in lab.hosts:
        assert f"nothing from {host.address}" in text, text[-3000:]
    assert not left, f"tasks outlived the partition from their launcher: {left}"
