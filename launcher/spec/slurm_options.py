"""The spec's Slurm tables: what an sbatch or srun option may be, which ones the launcher writes
itself (and what to use instead), and which it refuses."""

from __future__ import annotations

SLURM_TIME = r"^(\d+|\d+:\d{2}(:\d{2})?|\d+-\d{1,2}(:\d{2}(:\d{2})?)?|UNLIMITED|INFINITE)$"


SBATCH_OPTION = r"^--[a-z][a-z0-9-]*(=.*)?$"


# What the launcher writes itself, and what to use instead: a later line of the user's would win.
SBATCH_OWN = {
    "job-name": "name",
    "nodes": "slurm.nodes",
    "ntasks": "slurm.tasks_per_node",
    "ntasks-per-node": "slurm.tasks_per_node",
    "gpus-per-node": "slurm.gpus_per_node",
    "output": "run_root (the launcher follows that file)",
    "error": "run_root (the launcher follows one file)",
    "open-mode": "run_root (a requeued job appends)",
    "chdir": "workdir",
    "requeue": "slurm.requeue",
    "no-requeue": "slurm.requeue",
    "signal": "slurm.signal_before_end_s",
    "partition": "slurm.partition",
    "account": "slurm.account",
    "time": "slurm.time_limit",
}


SBATCH_REFUSED = {
    "wrap": "the batch script is the launcher's: give your command after -- instead",
    "array": "a run is one job (an array's jobs would share the run directory)",
}


# The srun step's own options: the agents' channel (input, output, labels) and their placement.
SRUN_OWN = ("input", "output", "error", "label", "pty", "open-mode", "nodes", "ntasks", "ntasks-per-node",
             "nodelist", "distribution", "kill-on-bad-exit")  # fmt: skip
