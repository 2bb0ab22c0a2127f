"""The exception that ended a task, found in its log; known failures named; hostile files read safely."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from launcher.common.log_reading import last_exception, read_end
from launcher.rundir.known_failures import KNOWN_FAILURES, known_failure
from launcher.rundir.report import failure_text, summary
from launcher.supervise.gang import AttemptResult, LaunchState, RunResult, TaskResult
from tests.conftest import REPO

FRAMES = '  File "/tmp/train.py", line 4, in <module>\n    step()\n    ^^^^^^\n'
KERAS_3 = (
    "Traceback (most recent call last):\n" + FRAMES + "ValueError: Attempt to convert a value (PerReplica:{\n"
    "  0: <tf.Tensor: shape=(8, 4), dtype=float32, numpy=\narray([[0.98, 0.99]], dtype=float32)>\n"
    "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.\n"
)


def test_the_last_traceback_gives_the_exception_with_its_whole_message() -> None:
    found = last_exception("I0000 00:00:1.0   1 x.cc:1] start\n" + KERAS_3)
    assert found is not None and found.type == "ValueError"
    assert found.message.startswith("Attempt to convert") and found.message.endswith("to a Tensor.")
    shown = found.shown(60)
    assert shown == "ValueError: Attempt to convert a value (PerReplica:{ 0: <..." and len(shown) == 60


def test_chained_exceptions_give_the_last_and_a_cpp_line_ends_the_message() -> None:
    text = (
        "Traceback (most recent call last):\n" + FRAMES + "KeyError: 'x'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n" + FRAMES + "tensorflow.python.framework.errors_impl.UnknownError: "
        "Could not start gRPC server\nW0000 00:00:1.0   1 preemption_notifier.cc:90] SIGTERM caught\n"
    )
    found = last_exception(text)
    assert found is not None and found.short_type == "UnknownError"
    assert found.message == "Could not start gRPC server"


@pytest.mark.parametrize(
    "text",
    ["", "just output\n", "Traceback (most recent call last):\n" + FRAMES, "Traceback (most recent call last):\n"],
)
def test_no_traceback_or_one_cut_before_its_exception_gives_none(text: str) -> None:
    assert last_exception(text) is None


def test_a_bare_exception_name_is_an_exception() -> None:
    found = last_exception("Traceback (most recent call last):\n" + FRAMES + "KeyboardInterrupt\n")
    assert found is not None and found.type == "KeyboardInterrupt" and found.shown() == "KeyboardInterrupt"


def test_read_end_reads_only_the_end_of_a_regular_file_never_a_fifo_or_a_link(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.log"
    log.write_text("a" * 100 + "THE END")
    assert read_end(str(log), limit=7) == "THE END"
    os.mkfifo(tmp_path / "fifo.log")
    assert read_end(str(tmp_path / "fifo.log")) == ""  # returns at once: nothing writes it
    (tmp_path / "link.log").symlink_to(log)
    assert read_end(str(tmp_path / "link.log")) == "" and read_end(str(tmp_path / "missing.log")) == ""


def test_the_exception_is_matched_before_the_tail() -> None:
    oom = "ResourceExhaustedError: OOM when allocating tensor with shape[1,1]"
    assert known_failure(oom).anchor == "out-of-memory"
    assert known_failure("", "killed by SIGKILL").anchor == "killed-by-sigkill"
    assert known_failure("killed by SIGKILL in a line of output") is None
    assert known_failure("ModuleNotFoundError: No module named 'tensorflow_datasets'") is None
    assert known_failure("ModuleNotFoundError: No module named 'tensorflow'").anchor == "tensorflow-is-not-installed"


def test_every_known_failure_has_its_section_in_the_troubleshooting_page() -> None:
    import re

    headings = re.findall(r"^#+ (.+)$", (REPO / "docs" / "troubleshooting.md").read_text(), re.M)
    slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
    assert {f.anchor for f in KNOWN_FAILURES} <= slugs, {f.anchor for f in KNOWN_FAILURES} - slugs


def _failed_run(tmp_path: Path, log: str, **how: object) -> RunResult:
    path = tmp_path / "worker-1.log"
    path.write_text(log)
    pid, code, signal_number = how.pop("pid", 7), how.pop("exit_code", 1), how.pop("signal", None)
    task = TaskResult("worker:1", "localhost", pid, code, signal_number, 0.0, 5.0, True, 3, str(path))
    attempt = AttemptResult(0, "worker:1 exited", "worker:1", "retryable", (task,), 0.0, 6.0)
    return RunResult("r", str(tmp_path), LaunchState.FAILED, [attempt])


def test_the_report_names_the_exception_and_the_known_cause_and_keeps_them_in_the_summary(tmp_path: Path) -> None:
    result = _failed_run(tmp_path, "\x1b]0;owned\x07tensor repr\n" * 40 + KERAS_3)
    text = failure_text(result)
    lines = text.splitlines()
    assert lines[1].startswith("root cause: worker:1 on localhost (pid 7) exit code 1")
    assert lines[2].startswith("  ValueError: Attempt to convert a value (PerReplica:{ 0: <tf.Tensor")
    assert lines[3].startswith("  known cause: Keras 3 model.fit") and "troubleshooting.md#keras-3" in lines[3]
    assert "\x1b" not in text and "\x07" not in text
    first = json.loads(json.dumps(summary(result)))["first_failure"]
    assert first["exception"]["type"] == "ValueError" and "PerReplica" in first["exception"]["message"]
    assert first["known_cause"]["see"].endswith("#keras-3-modelfit-under-the-strategy")


def test_a_task_killed_by_sigkill_without_a_traceback_points_at_the_oom_killer(tmp_path: Path) -> None:
    text = failure_text(_failed_run(tmp_path, "step 3\n", exit_code=None, signal=signal.SIGKILL))
    assert "killed by SIGKILL in attempt 0" in text and "known cause: the task was killed by SIGKILL" in text


def test_a_task_that_never_got_a_process_is_named_without_a_pid(tmp_path: Path) -> None:
    text = failure_text(_failed_run(tmp_path, "cannot start './train.sh': Exec format error\n", exit_code=127, pid=0))
    assert "root cause: worker:1 on localhost exit code 127" in text and "(pid" not in text


def test_a_kill_that_launch_inject_fired_is_named_as_the_rehearsal_it_is(tmp_path: Path) -> None:
    log = "step 69\ninjected fault: kill at step 70\n"
    text = failure_text(_failed_run(tmp_path, log, exit_code=None, signal=signal.SIGKILL))
    assert "known cause: `launch --inject` fired this fault" in text and "out-of-memory" not in text
    assert "troubleshooting.md#an-injected-fault" in text


THREAD_NOISE = (
    "Exception in thread PeerTerminationWatcher:\nTraceback (most recent call last):\n" + FRAMES + "KeyError: 'x'\n\n"
    "During handling of the above exception, another exception occurred:\n\n"
    "Traceback (most recent call last):\n" + FRAMES + "tensorflow.python.framework.errors_impl.UnavailableError: "
    "Socket closed\n"
)


def test_a_traceback_a_thread_printed_after_the_main_one_is_not_the_exception() -> None:
    main = "Traceback (most recent call last):\n" + FRAMES + "ValueError: bad batch\n"
    found = last_exception(main + THREAD_NOISE)
    assert found is not None and found.shown() == "ValueError: bad batch"
    alone = last_exception("step 3\n" + THREAD_NOISE)  # no other: the thread's is all there is
    assert alone is not None and alone.shown() == "UnavailableError: Socket closed"


def test_without_a_traceback_the_last_fatal_tensorflow_line_is_the_exception() -> None:
    text = (
        "E0000 00:00:1795417469.161697   21747 cuda_platform.cc:52] failed call to cuInit: (303)\n"
        "F0000 00:00:1795417470.312883   21747 collective_ops.cc:12] Check failed: group_size > 0 (0 vs. 0)\n"
        "*** Check failure stack trace: ***\n    @     0x7f00 abort\n"
    )
    found = last_exception(text)
    assert found is not None and found.shown() == "fatal: Check failed: group_size > 0 (0 vs. 0) (collective_ops.cc:12)"
    assert last_exception("E0000 00:00:1.0   1 x.cc:1] an error line only\n") is None


def test_the_shown_message_leaves_out_where_tensorflow_ran_the_op() -> None:
    text = (
        "Traceback (most recent call last):\n" + FRAMES + "tensorflow.python.framework.errors_impl.UnavailableError: "
        "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/replica:0/task:0/device:"
        "CPU:0}} Collective ops is aborted by: Failed to send RPC to coordination service.\n"
    )
    found = last_exception(text)
    assert found is not None and found.message.startswith("{{function_node")  # summary.json keeps it whole
    assert (
        found.shown() == "UnavailableError: Collective ops is aborted by: Failed to send RPC to coordination service."
    )


def test_a_users_own_error_is_not_given_the_cause_its_log_tail_mentions(tmp_path: Path) -> None:
    log = "Traceback (most recent call last):\n" + FRAMES + "ValueError: bad batch\n" + THREAD_NOISE
    text = failure_text(_failed_run(tmp_path, log))
    assert "  ValueError: bad batch" in text.splitlines() and "known cause" not in text


def test_a_task_that_left_no_exception_is_judged_by_its_log_tail(tmp_path: Path) -> None:
    log = (
        "E0000 00:00:1795417470.3   1 add_port.cc:83] Failed to add port to server: No address added out of total 1 "
        "resolved for '0.0.0.0:35287'\n"
    )
    lines = failure_text(_failed_run(tmp_path, log)).splitlines()
    assert lines[2].startswith("  known cause: TensorFlow could not listen on the task's port")
    assert lines[2].endswith("#the-tf-port-is-already-in-use)")


def test_the_log_tail_leaves_out_tensorflows_harmless_start_up_lines(tmp_path: Path) -> None:
    log = (
        "starting\nWARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1795417464.521002   21747 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
        "will not be used.\nTraceback (most recent call last):\n" + FRAMES + "ValueError: bad batch\n"
    )
    text = failure_text(_failed_run(tmp_path, log))
    assert "cuda" not in text and "absl" not in text and "    | starting" in text.splitlines()


def test_launch_status_shows_the_exception_and_the_known_cause_as_the_report_does(tmp_path: Path) -> None:
    from launcher.rundir.status import describe_run

    log = "Traceback (most recent call last):\n" + FRAMES + "ResourceExhaustedError: {{function_node x}} OOM when "
    result = _failed_run(tmp_path, log + "allocating tensor with shape[1048576,1048576]\n")
    (tmp_path / "summary.json").write_text(json.dumps(summary(result)))
    lines = describe_run(str(tmp_path)).text.splitlines()
    failed = next(line for line in lines if line.startswith("  first failure: worker:1"))
    assert failed.endswith(": ResourceExhaustedError: OOM when allocating tensor with shape[1048576,1048576]")
    assert "  known cause: out of memory: a tensor did not fit" in "\n".join(lines)
    assert next(line for line in lines if "known cause" in line).endswith("(see docs/troubleshooting.md#out-of-memory)")


def test_a_huge_line_in_the_log_tail_is_cut_so_the_error_below_it_shows(tmp_path: Path) -> None:
    from launcher.rundir.report import TAIL_LINE_CHARS

    text = failure_text(_failed_run(tmp_path, "[" + "0.5, " * 100_000 + "]\n" + "ValueError: bad batch\n"))
    assert max(len(line) for line in text.splitlines()) < TAIL_LINE_CHARS + 100
    assert "[... cut; the log has the whole line]" in text and text.rstrip().endswith("ValueError: bad batch")


def test_only_a_traceback_that_ends_the_log_is_how_the_process_ended() -> None:
    from launcher.common.log_reading import ending_exception

    died = 'step 3\nTraceback (most recent call last):\n  File "t.py", line 2\nValueError: bad batch\n'
    assert ending_exception(died) is not None and ending_exception(died).message == "bad batch"  # type: ignore[union-attr]
    shutdown = died + "I0000 00:00:1.2  345 grpc_server.cc:1] shutting down\n\n"
    assert ending_exception(shutdown) is not None  # TensorFlow's own log lines after it do not count
    handled = died + "retrying\ncheckpoint dir full; giving up\n"
    assert ending_exception(handled) is None  # printed and handled; it exited for another reason
    spread = 'Traceback (most recent call last):\n  File "t.py", line 2\nValueError: bad\nshape (3, 4)\n'
    assert ending_exception(spread) is None  # a message over lines cannot be told from later output
    assert ending_exception("F0000 00:00:1.2  345 x.cc:1] Check failed: y\n") is None
