"""TensorFlow's known-harmless start-up lines, which the console leaves out unless `-v` is given.

Every one of them is printed by every task of a CPU-only run, before training starts, and none
says anything the user can act on: the absl pre-init warning, the CUDA stub and driver lines and
cuInit's error 303 (no CUDA device) on hosts without GPUs, the CPU-instruction and oneDNN notices,
tf.data's notices that a generator dataset is not optimised and that a memory patch was applied,
and the INFO lines of the gang joining TensorFlow's coordination service (which the launcher
reports itself: it names a task that does not join). They stay in the task logs, and
docs/troubleshooting.md shows each. Anything not matched here reaches the console as before: a
line is only hidden when it is exactly one of these messages.
"""

from __future__ import annotations

import functools
import re

__all__ = ["is_benign", "benign_lines", "is_shutdown_noise", "opens_stragglers"]

# TensorFlow's C++ log prefix: `I0000 00:00:1795417464.521002   21747 cudart_stub.cc:31] `
_CPP = r"^[IWE]\d{4} [\d:.]+\s+\d+ "

_PATTERNS = (
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    _CPP + r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be used\.$",
    _CPP + r"cuda_(platform|executor)\.cc:\d+\] failed call to cuInit: .*UNKNOWN ERROR \(303\)$",
    _CPP + r"cuda_diagnostics\.cc:\d+\] ",
    _CPP + r"\w+\.cc:\d+\] Unable to register cu(DNN|FFT|BLAS) factory",
    _CPP + r"port\.cc:\d+\] oneDNN custom operations are on\.",
    _CPP + r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized to use available CPU instructions",
    r"^To enable the following instructions: .* in other operations, rebuild TensorFlow with the appropriate "
    r"compiler flags\.$",
    _CPP + r"dataset\.cc:\d+\] Input of GeneratorDatasetOp::Dataset will not be optimized because the dataset "
    r"does not implement the AsGraphDefInternal\(\) method needed to apply optimizations\.$",
)
_INFO = r"^I\d{4} [\d:.]+\s+\d+ "
_JOINING = (  # a healthy join, as every task of every run prints it; only at INFO level
    _INFO + r"coordination_service\.cc:\d+\] Initializing CoordinationService$",
    _INFO + r"grpc_server_lib\.cc:\d+\] Started server with target: grpc://\S+$",
    _INFO + r"coordination_service\.h:\d+\] /job:\w+/replica:\d+/task:\d+ has connected to coordination service\. "
    r"Incarnation: \d+$",
    _INFO + r"coordination_service\.cc:\d+\] Waiting for \d+/\d+ tasks to connect\.$",
    _INFO + r"coordination_service\.cc:\d+\] Example stragglers:$",  # then its task names, one per line
    _INFO + r"coordination_service_agent\.cc:\d+\] Coordination agent has successfully connected\.$",
    _INFO + r"coordination_service\.cc:\d+\] Barrier\(WaitForAllTasks::[\d:]+\) has passed with status: OK$",
    _INFO + r"generator_dataset_op\.cc:\d+\] Memory patch applied: M_TRIM_THRESHOLD=\d+ kb was set\.$",
)


# What a task prints when the coordination leader left before it (the heartbeat that finds the service gone):
# harmless once a task finished training (tflaunch.leaving explains; the runtime leaves in the right order),
# and then held back from the console: shown only if the run does not succeed after all.
_SHUTDOWN = (
    r"^E\d{4} [\d:.]+\s+\d+ base_collective_executor\.cc:\d+\] BaseCollectiveExecutor::StartAbort "
    r"(UNAVAILABLE|CANCELLED|ABORTED): ",
    r"^[EW]\d{4} [\d:.]+\s+\d+ coordination_service_agent\.cc:\d+\] ",
)
_SHUTDOWN_MORE = (  # the lines gRPC adds to such an error
    r"^Additional GRPC error information from remote target ",
    r"^:?\{?UNKNOWN:Error received from peer ",
    r".*grpc_status\W{0,2}14\b",
)


@functools.cache
def _shutdown() -> tuple[re.Pattern[str], re.Pattern[str]]:
    return re.compile("|".join(f"(?:{p})" for p in _SHUTDOWN)), re.compile("|".join(f"(?:{p})" for p in _SHUTDOWN_MORE))


def is_shutdown_noise(line: str, continuing: bool = False) -> bool:
    """A line TensorFlow prints when the coordination service has gone (`continuing`: the task's line before it
    was one, so gRPC's detail lines of the same error count too)."""
    first, more = _shutdown()
    stripped = line.rstrip()
    return first.match(stripped) is not None or (continuing and more.match(stripped) is not None)


@functools.cache
def _compiled() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """(benign, stragglers, task name), compiled at the first line a task prints, not at every launch's start."""
    return (
        re.compile("|".join(f"(?:{p})" for p in (*_PATTERNS, *_JOINING))),
        re.compile(_INFO + r"coordination_service\.cc:\d+\] Example stragglers:$"),
        re.compile(r"^/job:\w+/replica:\d+/task:\d+$"),
    )


def is_benign(line: str) -> bool:
    """True for a known-harmless TensorFlow start-up line (trailing whitespace ignored)."""
    return _compiled()[0].match(line.rstrip()) is not None


def opens_stragglers(line: str, listing: bool = False) -> bool:
    """Whether the task names that may follow `line` belong to a healthy join's "Example stragglers:"
    list (`listing`: the lines before it did): bare `/job:.../task:N` lines are hidden only there. The
    same names after a barrier's timeout ("Some timed out task names:") are what that failure needs."""
    _, stragglers, task_name = _compiled()
    stripped = line.rstrip()
    return stragglers.match(stripped) is not None or (listing and task_name.match(stripped) is not None)


def benign_lines(lines: list[str]) -> list[bool]:
    """For each line of a log, whether it is known-harmless (is_benign, or a name in a stragglers list)."""
    task_name = _compiled()[2]
    flags: list[bool] = []
    listing = False
    for line in lines:
        flags.append(is_benign(line) or (listing and task_name.match(line.rstrip()) is not None))
        listing = opens_stragglers(line, listing)
    return flags
