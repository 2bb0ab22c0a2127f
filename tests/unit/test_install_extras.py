"""The launcher installs without TensorFlow; the worker runtime's dependencies come with the `tf` extra."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_launcher_alone_pulls_no_tensorflow() -> None:
    names = {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in _project()["dependencies"]}
    assert not names & {"tensorflow", "tensorflow-cpu", "tensorboard", "tf-keras", "keras"}, names


def test_the_tf_extra_brings_the_runtime_and_the_readme_installs_it() -> None:
    extras = _project()["optional-dependencies"]
    assert any(r.startswith("tensorflow>=2.21") for r in extras["tf"])
    assert "tflaunch[tf]" in extras["fit"] and "tflaunch[tf]" in extras["test"]
    assert "setup.sh tf" in (REPO / "scripts" / "run-example.sh").read_text()


def test_the_license_pyproject_names_is_there() -> None:
    assert _project()["license"] == {"text": "Apache-2.0"}
    assert "Apache License" in (REPO / "LICENSE").read_text()
