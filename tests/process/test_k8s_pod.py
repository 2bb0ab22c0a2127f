"""`python -m worker.pod`, the exported pods' entry point, as a real process (no TensorFlow, no cluster):
it gives its child the computed TF_CONFIG, leaves with the child's exit code, passes SIGTERM on to
a trainer, and lets the evaluator finish instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from worker.contract import JOB_COMPLETION_INDEX_VAR, POD_LAYOUT_VAR, POD_TASK_TYPE_VAR, TF_CONFIG
from worker.pod import PodLayout

LAYOUT = PodLayout(
    run_name="p",
    run_dir="/tflaunch/p",
    checkpoint_dir="gs://b/p",
    host="p-{type}-0-{index}.p",
    port=2222,
    tasks={"worker": 2, "evaluator": 1},
    training={"kind": "builtin"},
    preemption_exit_code=42,
    umask="027",
)
# Says where it stands, then waits on stdin; SIGTERM makes it "save" and leave with 42.
CHILD = """
import json, os, signal, sys
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42)) if sys.argv[1] == "trainer" else None
umask = os.umask(0)
print(json.dumps({"pid": os.getpid(), "tf_config": os.environ["TF_CONFIG"], "task": os.environ["TFLAUNCH_TASK"],
                  "umask": umask}), flush=True)
line = sys.stdin.readline().strip()
sys.exit(int(line or 0)) if line != "kill" else os.kill(os.getpid(), signal.SIGKILL)
"""


def _start(work: Path, task_type: str, index: int, *command: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        POD_LAYOUT_VAR: LAYOUT.to_json(),
        POD_TASK_TYPE_VAR: task_type,
        JOB_COMPLETION_INDEX_VAR: str(index),
        "TEST_MARKER": str(work),  # lets the `work` fixture find anything left behind
    }
    argv = [sys.executable, "-m", "worker.pod", *(["--", *command] if command else [])]
    return subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _child(task: str) -> list[str]:
    return ["python", "-c", CHILD, task]


def test_the_child_gets_the_computed_tf_config_and_its_exit_code_is_the_pods(work: Path) -> None:
    pod = _start(work, "worker", 1, *_child("trainer"))
    assert pod.stdout is not None and pod.stdin is not None
    seen = json.loads(pod.stdout.readline())
    assert seen["task"] == "worker:1"
    assert seen["umask"] == 0o027  # the spec's, as an agent gives it on a host
    assert json.loads(seen["tf_config"]) == LAYOUT.tf_config("worker", 1)
    assert json.loads(seen["tf_config"])["cluster"] == {"worker": ["p-worker-0-0.p:2222", "p-worker-0-1.p:2222"]}
    _, err = pod.communicate("3\n", timeout=30)
    assert pod.returncode == 3
    assert f"worker.pod: worker:1, {TF_CONFIG}" in err


def test_sigterm_reaches_a_trainer_which_saves_and_leaves_with_42(work: Path) -> None:
    pod = _start(work, "worker", 0, *_child("trainer"))
    assert pod.stdout is not None
    json.loads(pod.stdout.readline())  # its SIGTERM handler is in place
    pod.send_signal(signal.SIGTERM)
    assert pod.wait(timeout=30) == 42  # stdin still open: only the forwarded signal ends it
    pod.communicate(timeout=30)


def test_the_evaluator_is_not_interrupted_by_sigterm(work: Path) -> None:
    pod = _start(work, "evaluator", 0, *_child("evaluator"))
    assert pod.stdout is not None and pod.stdin is not None
    seen = json.loads(pod.stdout.readline())
    assert json.loads(seen["tf_config"])["cluster"] == {"evaluator": ["p-evaluator-0-0.p:2222"]}
    pod.send_signal(signal.SIGTERM)
    os.kill(seen["pid"], signal.SIGTERM)  # the child ignores it too: it scores until the grace period ends
    pod.communicate("0\n", timeout=30)
    assert pod.returncode == 0


def test_death_by_a_signal_and_unusable_pods_become_exit_codes(work: Path) -> None:
    pod = _start(work, "worker", 0, *_child("trainer"))
    assert pod.stdout is not None
    json.loads(pod.stdout.readline())
    pod.communicate("kill\n", timeout=30)
    assert pod.returncode == 128 + signal.SIGKILL
    pod = _start(work, "worker", 0, "no-such-command-here")
    _, err = pod.communicate(timeout=30)
    assert pod.returncode == 2 and "cannot run 'no-such-command-here'" in err
    pod = _start(work, "worker", 5)
    _, err = pod.communicate(timeout=30)
    assert pod.returncode == 2 and "JOB_COMPLETION_INDEX='5'" in err
