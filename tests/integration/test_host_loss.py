"""A host gone for good, on real processes: stock sshd on loopback aliases, real TensorFlow workers.

The lost host has an sshd of its own, killed with everything under it mid-training (its agent and
tasks too), so nothing answers at its address again: a spare takes its tasks, or an elastic gang goes
on without it with the same global batch.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import launch_cmd, local_spec, run_launch, wait_until_gone, write_spec
from tests.integration.test_ssh import ssh_host, ssh_spec
from tests.integration.test_train_local import assert_agree, results
from tests.labs.sshd import SshServer, start_sshd
from tests.labs.waiting import wait_for_text

pytestmark = pytest.mark.tf

DOOMED = "127.0.0.5"


@pytest.fixture
def doomed_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """An sshd of its own for the host the test kills for good (outside `work`: not a process of the run)."""
    server = start_sshd(tmp_path_factory.mktemp("doomed-sshd"), (DOOMED,))
    yield server
    server.stop()
    assert server.process.poll() is not None


def _run_until_killed(
    work: Path, spec: dict[str, Any], doomed: SshServer, ready: Callable[[Path], bool] | None = None
) -> tuple[int, str]:
    """Launch, kill the doomed host's sshd and everything under it once the gang trained past its first
    checkpoint (and `ready` says so of the run directory), and wait for the launch to end."""
    log = work / "launch.out"
    run_dir = work / "runs" / spec["name"]
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
        try:
            wait_for_text(log, "step 30/", 180, lambda: proc.poll() is None)
            deadline = time.monotonic() + 120
            while ready is not None and not ready(run_dir):
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.1)
            doomed.stop()  # sshd, its sessions, the agent and the tasks under them: nothing answers there now
            code = proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return code, log.read_text()


def _spares_ready(count: int) -> Callable[[Path], bool]:
    def ready(run_dir: Path) -> bool:
        try:
            status = json.loads((run_dir / "status.json").read_text())
        except (OSError, ValueError):
            return False
        return bool(status.get("spares")) and status["spares"]["ready"] >= count

    return ready


def _final_weights(checkpoint_dir: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(checkpoint_dir)))
    # the weights, the optimizer's slots and its step (save_counter and the run count differ after a restart)
    names = [n for n in reader.get_variable_to_shape_map() if n.startswith("optimizer/")]
    return {name: reader.get_tensor(name) for name in names}


def test_a_host_killed_for_good_is_replaced_by_the_spare(work: Path, sshd: SshServer, doomed_sshd: SshServer) -> None:
    hosts = [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3"), ssh_host(doomed_sshd, DOOMED)]
    spec = ssh_spec(work, "spare", hosts, steps=1500, checkpoint_every=20)
    spec["spare_hosts"] = [ssh_host(sshd, "127.0.0.4")]
    spec["checkpoint_dir"] = str(work / "shared" / "spare")
    spec["restart"].update(warm_spares_after_s=0)
    # the kill waits for every spare: the tasks' own (forked) and the spare host's standby
    code, text = _run_until_killed(work, spec, doomed_sshd, _spares_ready(4))
    assert code == 0, text[-4000:]
    assert f"host {DOOMED} excluded" in text and "spare 127.0.0.4 takes its tasks" in text, text[-4000:]
    assert "not counted against max_restarts" in text
    run_dir = work / "runs" / "spare"
    summary = json.loads((run_dir / "summary.json").read_text())
    last = summary["attempts"][-1]
    assert {t["host"] for t in last["tasks"]} == {"127.0.0.2", "127.0.0.3", "127.0.0.4"}
    assert {t["name"] for t in last["tasks"]} == {"worker:0", "worker:1", "worker:2"}
    assert summary["restarts"] == 0 and summary["attempts"][-2].get("regrouped") is True
    [excluded] = summary["excluded_hosts"]
    assert excluded["host"] == DOOMED and excluded["replaced_by"] == "127.0.0.4" and excluded["seat"] == 2
    found = results(run_dir, len(summary["attempts"]) - 1)
    assert_agree(found, 3, 1500)
    recovery = last["recovery"]
    assert recovery["warm_tasks"] == 3, recovery  # worker:2 on the spare host too: its standby was ready
    rows = json.loads((run_dir / "status.json").read_text())["tasks"]
    assert sorted(row["task"] for row in rows) == ["worker:0@127.0.0.2", "worker:1@127.0.0.3", "worker:2@127.0.0.4"]
    status = run_launch(["status", str(run_dir)], work)
    assert f"excluded: {DOOMED}" in status.stdout and "127.0.0.4 took its tasks" in status.stdout
    assert not wait_until_gone(str(work), 15)


def test_an_elastic_gang_goes_on_with_two_hosts_and_the_same_global_batch(
    work: Path, sshd: SshServer, doomed_sshd: SshServer
) -> None:
    # the spec's global batch 3 x 5 x 2 = 30 is 15 a replica on two: micro-batches of 8 and 7 examples
    training = {"steps": 60, "checkpoint_every": 20, "batch_per_replica": 5, "accumulation_steps": 2}
    hosts = [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3"), ssh_host(doomed_sshd, DOOMED)]
    spec = ssh_spec(work, "shrink", hosts, **training)
    spec["elastic"] = {"min_hosts": 2}
    spec["checkpoint_dir"] = str(work / "shared" / "shrink")
    code, text = _run_until_killed(work, spec, doomed_sshd)
    assert code == 0, text[-4000:]
    assert "the gang goes on with 2 of its 3 hosts" in text, text[-4000:]
    run_dir = work / "runs" / "shrink"
    summary = json.loads((run_dir / "summary.json").read_text())
    attempt = len(summary["attempts"]) - 1
    found = results(run_dir, attempt)
    assert_agree(found, 2, 60)
    rows = json.loads((run_dir / "status.json").read_text())["tasks"]
    assert sorted(row["task"] for row in rows) == ["worker:0@127.0.0.2", "worker:1@127.0.0.3"], rows
    assert {(r["global_batch"], r["replicas_in_sync"]) for r in found.values()} == {(30, 2)}
    chief_log = (run_dir / f"attempt-{attempt}" / "worker-0.log").read_text()
    assert (
        "global batch 30 (unchanged: the spec's, kept on fewer hosts) = 15 per replica x 2 replicas, each in 2 "
        "accumulated micro-batches of uneven size (the loss averaged over the global batch)"
    ) in chief_log, chief_log[-3000:]

    reference = local_spec("whole", 3, work / "runs", kind="builtin", log_every=10, **training)
    reference["checkpoint_dir"] = str(work / "shared" / "whole")
    proc = run_launch(["--cluster", str(write_spec(work, reference, "whole.json"))], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shrunk, whole = _final_weights(work / "shared" / "shrink"), _final_weights(work / "shared" / "whole")
    assert shrunk.keys() == whole.keys() and shrunk
    for name, value in whole.items():  # the same examples in every step; only the order of the sums differs
        np.testing.assert_allclose(shrunk[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    assert not wait_until_gone(str(work), 15)


def test_a_host_that_is_the_root_cause_twice_is_excluded_and_the_run_finishes_without_it(
    work: Path, sshd: SshServer
) -> None:
    hosts = [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3"), ssh_host(sshd, "127.0.0.4")]
    hosts[1]["env"] = {"BAD_HOST": "1"}
    spec = ssh_spec(work, "strikes", hosts)
    spec["training"] = {"kind": "function", "target": "user_fns:fails_on_a_bad_host", "steps": 3}
    spec["elastic"] = {"min_hosts": 2}
    spec["restart"].update(max_restarts=3)
    proc = run_launch(["--cluster", str(write_spec(work, spec))], work)
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = proc.stderr + proc.stdout
    assert "host 127.0.0.3 excluded for 60s (the root cause of 2 failed attempts in a row)" in text, text[-4000:]
    summary = json.loads((work / "runs" / "strikes" / "summary.json").read_text())
    assert [a["kind"] for a in summary["attempts"]] == ["retryable", "retryable", "none"]
    assert {t["host"] for t in summary["attempts"][-1]["tasks"]} == {"127.0.0.2", "127.0.0.4"}
    assert summary["restarts"] == 1, "the first failure is a restart; the exclusion's is not counted"
    assert [e["host"] for e in summary["excluded_hosts"]] == ["127.0.0.3"]
    assert not wait_until_gone(str(work), 15)


def test_a_host_back_after_its_cooldown_rejoins_at_a_checkpoint(
    work: Path, sshd: SshServer, doomed_sshd: SshServer
) -> None:
    hosts = [ssh_host(sshd, "127.0.0.2"), ssh_host(sshd, "127.0.0.3"), ssh_host(doomed_sshd, DOOMED)]
    spec = ssh_spec(work, "grow", hosts, steps=100000, checkpoint_every=20, batch_per_replica=16)
    spec["elastic"] = {"min_hosts": 2}
    spec["restart"].update(host_cooldown_s=1)
    spec["checkpoint_dir"] = str(work / "shared" / "grow")
    log = work / "launch.out"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            launch_cmd("--cluster", str(write_spec(work, spec))), cwd=work, stdout=handle, stderr=subprocess.STDOUT
        )
        try:
            alive = lambda: proc.poll() is None  # noqa: E731
            wait_for_text(log, "step 30/", 180, alive)
            doomed_sshd.stop()
            wait_for_text(log, "the gang goes on with 2 of its 3 hosts", 120, alive)
            doomed_sshd.start_again()
            wait_for_text(log, f"host {DOOMED} passed its preflight and rejoins", 120, alive)
            wait_for_text(log, "restarting every task on the larger gang", 120, alive)
            run_dir = work / "runs" / "grow"
            wait_for_text(run_dir / "attempt-2" / "worker-2.log", "global batch 48 = 16 per replica", 120, alive)
            wait_for_text(run_dir / "attempt-2" / "worker-0.log", "step 20", 120, alive)
        finally:
            proc.terminate()  # Ctrl-C's signal: the gang saves and the launcher ends
            proc.wait(timeout=120)
    text = log.read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    shrunk, saved = summary["attempts"][1], summary["attempts"][1]["tasks"]
    assert shrunk["kind"] == "preempted" and shrunk.get("regrouped") is True, shrunk
    assert {t["host"] for t in saved} == {"127.0.0.2", "127.0.0.3"}
    grown = summary["attempts"][2]
    assert {t["host"] for t in grown["tasks"]} == {"127.0.0.2", "127.0.0.3", DOOMED}
    # zero steps lost: the larger gang starts at the very step the smaller one saved
    last_saved = max(t["step"] for t in saved if t["step"] is not None)
    restored = (run_dir / "attempt-2" / "worker-0.log").read_text()
    assert f"continuing from step {last_saved}" in restored, (last_saved, restored[-2000:])
    assert summary["restarts"] == 0 and summary["preemptions"] == 0, text[-3000:]
    assert shrunk["reason"].startswith(f"host {DOOMED} rejoins: every task saved"), shrunk["reason"]
    assert "rejoined at" in run_launch(["status", str(run_dir)], work).stdout
    excluded = summary["excluded_hosts"]  # lost; then maybe kept out by a preflight tried before sshd was back
    assert {e["host"] for e in excluded} == {DOOMED} and excluded[0]["seat"] == 2
    assert excluded[-1]["rejoined_at"] is not None and excluded[-1]["rejoined_at"] >= excluded[-1]["until"]
    assert not wait_until_gone(str(work), 15)  # the sshd that is back is not the run's


def test_uneven_shares_hold_exactly_the_examples_of_each_step() -> None:
    """Five replicas sharing the spec's global batch of 112 (23, 23, 22, 22, 22): together, step s's examples."""
    import tensorflow as tf

    from worker import example
    from worker.batch_shares import batch_shares

    shares = batch_shares(16, 1, 5, 5, 7)
    make = example.dataset_fn(3, 5, shares, features=4, seed=1)
    per_pipeline = [list(make(tf.distribute.InputContext(5, p, 5)).as_numpy_iterator()) for p in range(5)]
    for step in range(2):  # steps 3 and 4
        xs = np.concatenate([per_pipeline[p][step][0] for p in range(5)])
        expected, _ = example.examples(tf.range((3 + step) * 112, (4 + step) * 112, dtype=tf.int64), 4, 1)
        np.testing.assert_allclose(xs, expected.numpy(), rtol=1e-5, atol=1e-6)  # eager and graph sin() differ
    assert [len(per_pipeline[p][0][0]) for p in range(5)] == [23, 23, 22, 22, 22]
