"""A stand-in `nvidia-smi` for the GPU preflight tests: prints the outputs of tests/data/nvidia-smi/<NAME>.

The outputs come from the directory named by FAKE_NVIDIA_SMI. A host's python can be a small
wrapper that sets it, so two "hosts" on this machine answer as two different GPU machines.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.conftest import REPO

OUTPUTS = REPO / "tests" / "data" / "nvidia-smi"
FAKE_VAR = "FAKE_NVIDIA_SMI"
_SCRIPT = """#!/bin/sh
# A stand-in nvidia-smi: prints the outputs in $FAKE_NVIDIA_SMI as nvidia-smi would.
dir="${FAKE_NVIDIA_SMI:?FAKE_NVIDIA_SMI names the outputs to print}"
if [ -f "$dir/hang" ]; then exec sleep 60; fi
case "$*" in
  *--query-gpu=*) cat "$dir/query.csv" ;;
  "") cat "$dir/plain.txt" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
if [ -f "$dir/exit_code" ]; then exit "$(cat "$dir/exit_code")"; fi
"""


def install_nvidia_smi(bin_dir: Path) -> Path:
    """Write the stand-in as bin_dir/nvidia-smi; put bin_dir on PATH to use it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "nvidia-smi"
    path.write_text(_SCRIPT, encoding="utf-8")
    path.chmod(0o755)
    return path


def outputs(name: str) -> str:
    return str(OUTPUTS / name)


def python_seeing(directory: Path, name: str) -> Path:
    """A python for a simulated host whose nvidia-smi prints the outputs `name`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"python-{name}"
    path.write_text(f'#!/bin/sh\n{FAKE_VAR}="{outputs(name)}" exec "{sys.executable}" "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
