"""The GPU preflight: nvidia-smi's outputs read, each host checked against the spec, hosts compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.agent import probe
from launcher.preflight.gpus import GpuHost, GpuInventory, fleet_problems, inventory, parse_cuda_version, parse_gpu_list
from tests.labs.gpu_fakes import FAKE_VAR, OUTPUTS, install_nvidia_smi, outputs


def recorded(name: str) -> dict:
    """The probe's answer for a host whose nvidia-smi printed tests/data/nvidia-smi/<name>."""
    folder = OUTPUTS / name
    code = int((folder / "exit_code").read_text()) if (folder / "exit_code").exists() else 0
    answer: dict = {
        "path": "/usr/bin/nvidia-smi",
        "query": {"code": code, "stdout": (folder / "query.csv").read_text()},
    }
    if code == 0:
        answer["header"] = {"code": 0, "stdout": (folder / "plain.txt").read_text()}
    return answer


def host(name: str, wanted: tuple[int, ...], address: str = "gpu-a") -> GpuHost:
    return GpuHost(address, "hosts[0].gpus", wanted, inventory(recorded(name)))


def test_reads_the_gpu_list_and_the_cuda_version() -> None:
    found = inventory(recorded("h100x4-550"))
    assert found.problem is None
    assert [g.index for g in found.gpus] == [0, 1, 2, 3]
    assert found.gpus[0].name == "NVIDIA H100 80GB HBM3" and found.gpus[0].memory_mib == 81559
    assert found.gpus[2].uuid.startswith("GPU-d27b9e13")
    assert found.driver == "550.54.15" and found.cuda == "12.4"
    assert found.describe() == "4 x NVIDIA H100 80GB HBM3 (driver 550.54.15, CUDA 12.4)"


@pytest.mark.parametrize(
    "line, index, name, memory",
    [
        ("0, GPU-1, NVIDIA A100-SXM4-40GB, 535.183.01, 40960 MiB", 0, "NVIDIA A100-SXM4-40GB", 40960),  # with units
        ("3,GPU-2,Tesla V100-SXM2-16GB,470.57.02,16160", 3, "Tesla V100-SXM2-16GB", 16160),  # no spaces
        ("1, GPU-3, Some GPU, rev 2, 550.1, [N/A]", 1, "Some GPU, rev 2", None),  # a comma in the name; no memory
    ],
)
def test_gpu_list_lines_in_the_forms_nvidia_smi_prints(line: str, index: int, name: str, memory: int | None) -> None:
    (gpu,) = parse_gpu_list(f"\n{line}\n\n")
    assert (gpu.index, gpu.name, gpu.memory_mib) == (index, name, memory)


@pytest.mark.parametrize("text", ["No devices were found", "0, GPU-1, only three", "x, GPU-1, A, 1.0, 10"])
def test_an_unreadable_gpu_list_is_one_clear_problem(text: str) -> None:
    found = inventory({"path": "/usr/bin/nvidia-smi", "query": {"code": 0, "stdout": text}})
    assert found.problem is not None and "cannot read nvidia-smi's GPU list" in found.problem
    assert not found.gpus


def test_cuda_version_from_the_plain_header_or_the_long_report() -> None:
    assert parse_cuda_version((OUTPUTS / "a100x2-535" / "plain.txt").read_text()) == "12.2"
    assert (
        parse_cuda_version("Driver Version                            : 515.65.01\nCUDA Version     : 11.7\n") == "11.7"
    )
    assert parse_cuda_version("no header") is None


@pytest.mark.parametrize(
    "answer, needle",
    [
        ({"path": None}, "nvidia-smi is not on PATH"),
        (recorded("driver-down"), "nvidia-smi failed (exit 9: NVIDIA-SMI has failed because it couldn't communicate"),
        ({"path": "/x/nvidia-smi", "query": {"timeout": 10.0}}, "did not answer within 10s"),
        ({"path": "/x/nvidia-smi", "query": {"error": "Permission denied"}}, "could not be run (Permission denied)"),
    ],
)
def test_a_missing_or_broken_nvidia_smi_is_one_line_naming_the_host(answer: dict, needle: str) -> None:
    problems = fleet_problems([GpuHost("gpu-b", "hosts[1].gpus", (0, 1), inventory(answer))])
    assert len(problems) == 1, problems
    assert problems[0].startswith("gpu-b: ") and needle in problems[0], problems[0]
    assert "the spec gives this host GPUs 0, 1" in problems[0]


def test_ids_the_host_does_not_have_are_named() -> None:
    (problem,) = fleet_problems([host("a100x2-535", (0, 1, 2, 3))])
    assert problem.startswith("gpu-a: GPU 2, 3 of hosts[0].gpus does not exist there")
    assert "nvidia-smi lists 2 GPU(s) (0, 1) and the spec gives this host 4" in problem
    (problem,) = fleet_problems([host("h100x4-550", (0, 7))])
    assert "GPU 7 of hosts[0].gpus does not exist there" in problem
    assert fleet_problems([host("h100x4-550", (0, 1, 2, 3)), host("h100x4-550", (2, 3), "gpu-b")]) == []


def test_no_gpu_listed_at_all() -> None:
    (problem,) = fleet_problems([GpuHost("gpu-a", "hosts[0].gpus", (0,), GpuInventory())])
    assert "nvidia-smi lists no GPU but the spec gives this host 1" in problem


def test_driver_and_cuda_versions_are_compared_across_hosts() -> None:
    problems = fleet_problems(
        [host("h100x4-550", (0, 1), "gpu-a"), host("h100x4-535", (0, 1), "gpu-b"), host("a100x2-535", (0, 1), "gpu-c")]
    )
    assert problems == [
        "NVIDIA driver versions differ across hosts (535.183.01 on gpu-b, gpu-c; 550.54.15 on gpu-a); install the "
        "same NVIDIA driver on every host, so every worker runs the same CUDA stack",
        "CUDA versions differ across hosts (12.2 on gpu-b, gpu-c; 12.4 on gpu-a); install the same NVIDIA driver on "
        "every host, so every worker runs the same CUDA stack",
    ]


def test_in_a_slurm_step_the_ids_are_slots_of_the_steps_devices() -> None:
    answer = {**recorded("h100x4-550"), "slurm_step_devices": "2,3"}
    slots = GpuHost("n1", "hosts[0].gpus", (0, 1), inventory(answer))
    assert fleet_problems([slots]) == []
    (problem,) = fleet_problems([GpuHost("n1", "hosts[0].gpus", (0, 1, 2), inventory(answer))])
    assert problem.startswith("n1: the Slurm step sees 2 GPU(s) but the node's tasks need 3")


def test_the_probe_reports_nvidia_smi_unparsed(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_nvidia_smi(work / "bin")
    monkeypatch.setenv("PATH", f"{work / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv(FAKE_VAR, outputs("h100x4-550"))
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    answer = probe.handle({"op": "info", "workdir": str(work), "gpus": True})["gpus"]
    assert answer["path"] == str(work / "bin" / "nvidia-smi")
    assert answer["query"]["code"] == 0 and "NVIDIA H100 80GB HBM3" in answer["query"]["stdout"]
    assert "CUDA Version: 12.4" in answer["header"]["stdout"]
    assert "slurm_step_devices" not in answer
    assert inventory(answer).describe() == "4 x NVIDIA H100 80GB HBM3 (driver 550.54.15, CUDA 12.4)"
    assert "gpus" not in probe.handle({"op": "info", "workdir": str(work)}), "asked only when the spec has GPUs"


def test_the_probe_without_nvidia_smi_and_with_a_failing_one(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(work / "empty"))
    assert probe.handle({"op": "info", "workdir": str(work), "gpus": True})["gpus"] == {"path": None}
    install_nvidia_smi(work / "bin")
    monkeypatch.setenv("PATH", f"{work / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv(FAKE_VAR, outputs("driver-down"))
    answer = probe.handle({"op": "info", "workdir": str(work), "gpus": True})["gpus"]
    assert answer["query"]["code"] == 9 and "header" not in answer
    assert "couldn't communicate with the NVIDIA driver" in str(inventory(answer).problem)


def test_a_hung_nvidia_smi_is_given_up_after_a_bounded_time(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hung = work / "hung"
    hung.mkdir()
    (hung / "hang").write_text("")
    install_nvidia_smi(work / "bin")
    monkeypatch.setenv("PATH", f"{work / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv(FAKE_VAR, str(hung))
    monkeypatch.setattr(probe, "NVIDIA_SMI_TIMEOUT_S", 0.5)
    answer = probe.handle({"op": "info", "workdir": str(work), "gpus": True})["gpus"]
    assert answer["query"] == {"timeout": 0.5}
    assert "did not answer within 0.5s" in str(inventory(answer).problem)


def test_in_a_slurm_step_the_probe_reports_the_steps_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    answer = probe.handle({"op": "info", "workdir": str(tmp_path), "gpus": True})["gpus"]
    assert answer == {"path": None, "slurm_step_devices": "4,5"}
