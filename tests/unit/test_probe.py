"""The preflight probe finds TensorFlow and the worker runtime without running site first, and
falls back to site where only a .pth file knows the way (an editable install)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from launcher.agent import host_python, network, probe
from launcher.agent.bootstrap import agent_line
from launcher.agent.host_python import module_found
from launcher.transport.local import open_local
from launcher.transport.session import AgentSession
from tests.conftest import REPO


def _install(site_dir: Path, distribution: str, version: str) -> None:
    (site_dir / "tensorflow").mkdir(parents=True)
    (site_dir / f"{distribution}-{version}.dist-info").mkdir()


def test_tensorflow_version_comes_from_its_dist_info(tmp_path: Path) -> None:
    _install(tmp_path / "a", "tensorflow_cpu", "2.21.0")
    (tmp_path / "b").mkdir()
    assert host_python._tensorflow_in([str(tmp_path / "b"), str(tmp_path / "a")]) == "2.21.0"
    assert host_python._tensorflow_in([str(tmp_path / "b")]) is None


def test_a_dist_info_without_the_package_is_not_tensorflow(tmp_path: Path) -> None:
    (tmp_path / "tensorflow-2.21.0.dist-info").mkdir()  # left behind by an uninstall
    assert host_python._tensorflow_in([str(tmp_path)]) is None


def test_the_worker_runtime_is_found_in_a_site_directory(tmp_path: Path) -> None:
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "runtime.py").write_text("")
    assert host_python._worker_in([str(tmp_path)]) and not host_python._worker_in([str(tmp_path / "worker")])


def _ask(python: str, request: dict[str, object], cwd: Path) -> dict[str, object]:
    """Start an agent as a host would (isolated, no site at start-up) and ask its probe one question."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        session = AgentSession("localhost", python, open_local("localhost", python, agent_line(15.0, False)), 15.0)
    finally:
        os.chdir(old)
    try:
        session.wait_ready(30)
        return session.probe(request)
    finally:
        session.close()


def test_the_probe_sees_what_the_task_will_import(tmp_path: Path) -> None:
    import importlib.metadata

    answer = _ask(sys.executable, {"op": "info", "workdir": ".", "need_worker": True}, tmp_path)
    assert answer["tensorflow"] == importlib.metadata.version("tensorflow")
    # the suite runs from an editable install: outside the checkout only site's .pth processing
    # finds `worker`, so this passes only if the probe falls back to running site
    assert answer["worker_ok"] is True


def test_host_facts_are_looked_up_once_and_shared_by_every_info(monkeypatch: object, tmp_path: Path) -> None:
    calls: list[str] = []
    monkeypatch.setattr(host_python, "_facts", {})  # type: ignore[attr-defined]
    monkeypatch.setattr(host_python, "_tensorflow_version", lambda: calls.append("tf") or "2.21.0")  # type: ignore[attr-defined]
    monkeypatch.setattr(host_python, "_worker_importable", lambda: calls.append("worker") or True)  # type: ignore[attr-defined]
    host_python.host_facts()  # what the agent does as soon as it has said it is ready
    probe.handle({"op": "info", "workdir": str(tmp_path)})
    assert calls == ["tf"]  # the runtime is looked for only when an info needs it (a command does not)
    first = probe.handle({"op": "info", "workdir": str(tmp_path), "need_worker": True})
    probe.handle({"op": "info", "workdir": str(tmp_path), "need_worker": True})
    second = probe.handle({"op": "info", "workdir": str(tmp_path / "missing")})
    assert calls == ["tf", "worker"]
    assert first["tensorflow"] == second["tensorflow"] == "2.21.0" and first["worker_ok"] is True
    assert first["workdir_ok"] is True and second["workdir_ok"] is False and "worker_ok" not in second


def test_the_mesh_check_skips_only_pairs_of_local_hosts_on_loopback_addresses() -> None:
    from launcher.preflight.check import _apart, _Host

    def host(address: str, local: bool) -> _Host:
        return _Host(0, address, local, "python3", ".", [])

    a, b, named = host("127.0.0.2", True), host("127.0.0.3", True), host("localhost", True)
    typo, remote = host("10.0.0.5", True), host("127.0.0.4", False)  # a local host's peers dial its address
    resolved = host("train.localhost", True)  # resolved by every peer: it may not resolve at all
    assert not _apart(a, a) and not _apart(a, b) and not _apart(b, named)
    assert _apart(a, typo) and _apart(typo, a) and _apart(a, remote) and _apart(remote, a)
    assert _apart(a, resolved) and _apart(resolved, named)


def test_a_virtual_environments_packages_are_found_without_running_site() -> None:
    """Without site (`-S`, as the agent starts) a venv's python has the base python's prefix: the
    probe reads pyvenv.cfg itself rather than running site and importlib.metadata on every host."""
    import importlib.metadata
    import subprocess

    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from launcher.agent import host_python; "
        "print(host_python._tensorflow_version(), 'importlib.metadata' in sys.modules, host_python._site_ran)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(Path(__file__).resolve().parents[2])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == [importlib.metadata.version("tensorflow"), "False", "[]"], out


def test_a_venv_that_sees_the_system_packages_adds_them(tmp_path: Path, monkeypatch: object) -> None:
    site_dir = tmp_path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site_dir.mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # type: ignore[attr-defined]
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)  # type: ignore[attr-defined]
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    assert host_python._site_dirs() == [str(site_dir)]
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = true\n")
    import site

    assert host_python._site_dirs()[0] == str(site_dir)
    assert set(host_python._site_dirs()[1:]) == {d for d in site.getsitepackages() if os.path.isdir(d)} | (
        {site.getusersitepackages()} if os.path.isdir(site.getusersitepackages()) else set()
    )


def test_the_mesh_check_connects_to_every_address_from_one_thread() -> None:
    """Answers as socket.create_connection would, for every address at once: reached, refused, a
    name that does not resolve; and no thread per address."""
    import socket
    import threading

    listening = socket.create_server(("127.0.0.1", 0))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: a connection to it is refused
    try:
        up, down = listening.getsockname()[1], closed.getsockname()[1]
        seen: list[int] = []
        real_start = threading.Thread.start
        threading.Thread.start = lambda self: seen.append(1) or real_start(self)  # type: ignore[method-assign]
        try:
            answer = probe.handle(
                {
                    "op": "connect",
                    "addresses": [
                        ["127.0.0.1", up],
                        ["127.0.0.1", down],
                        ["localhost", up],
                        ["no-such-host.invalid", up],
                    ],
                    "timeout": 5,
                }
            )
        finally:
            threading.Thread.start = real_start  # type: ignore[method-assign]
        results = answer["results"]
        assert results[f"127.0.0.1:{up}"] == "ok" and results[f"localhost:{up}"] == "ok"
        assert results[f"127.0.0.1:{down}"] == "Connection refused"
        assert results[f"no-such-host.invalid:{up}"] not in ("ok", "TimeoutError")
        assert len(seen) <= 2, "the names were looked up side by side, the connections made from one thread"
    finally:
        listening.close()
        closed.close()


def test_the_mesh_check_holds_few_sockets_and_survives_an_unusable_address_family(monkeypatch: object) -> None:
    """A host with a low descriptor limit checks its peers a few at a time; an address family the
    host lacks (IPv6 off) fails that address only, as socket.create_connection would."""
    import errno
    import socket

    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    real_socket = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: object) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real_socket(family, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(network, "_in_flight", lambda: 2)
    monkeypatch.setattr(network.socket, "socket", no_ipv6)
    try:
        addresses = [["127.0.0.1", port]] * 12 + [["::1", port]]
        answer = probe.handle({"op": "connect", "addresses": addresses, "timeout": 5})
    finally:
        listening.close()
    assert answer["results"] == {f"127.0.0.1:{port}": "ok", f"::1:{port}": "Address family not supported by protocol"}


def test_a_module_is_looked_for_without_running_any_of_it(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('ran')\n")
    (package / "sub" / "mod.py").write_text("raise SystemExit('ran')\n")
    (tmp_path / "spaced" / "inner").mkdir(parents=True)  # a namespace package: no __init__
    (tmp_path / "spaced" / "inner" / "m.py").write_text("")
    assert module_found("pkg", [str(tmp_path)]) and module_found("pkg.sub.mod", [str(tmp_path)])
    assert module_found("spaced.inner.m", [str(tmp_path)])
    assert not module_found("pkg.sub.absent", [str(tmp_path)]) and not module_found("nosuch_xyz", [str(tmp_path)])
    assert not module_found("spaced.absent", [str(tmp_path)]) and not module_found("bad name", [str(tmp_path)])
    assert module_found("os.path", []) and module_found("sys", []) and module_found("json.decoder", [])


def test_a_script_is_what_python_can_run_a_file_a_directory_or_a_zip_with_a_main(tmp_path: Path) -> None:
    import py_compile
    import zipfile

    from launcher.agent.host_python import _script_problem

    (tmp_path / "t.py").write_text("print(1)\n")
    assert _script_problem(str(tmp_path / "t.py")) is None
    assert _script_problem(str(tmp_path / "absent.py")) == "no such file"
    (tmp_path / "app").mkdir()
    assert _script_problem(str(tmp_path / "app")) == "a directory without __main__.py"
    py_compile.compile(str(tmp_path / "t.py"), cfile=str(tmp_path / "app" / "__main__.pyc"))
    assert _script_problem(str(tmp_path / "app")) is None  # bytecode only: runpy runs it
    with zipfile.ZipFile(tmp_path / "no.zip", "w") as archive:
        archive.writestr("foo.py", "print(1)\n")
    assert _script_problem(str(tmp_path / "no.zip")) == "a zip archive without __main__.py"
    with zipfile.ZipFile(tmp_path / "yes.zip", "w") as archive:
        archive.writestr("__main__.py", "print(1)\n")
    assert _script_problem(str(tmp_path / "yes.zip")) is None


def test_a_package_split_across_roots_the_old_way_is_found(tmp_path: Path) -> None:
    for root in ("work", "lib"):
        (tmp_path / root / "corp").mkdir(parents=True)
        (tmp_path / root / "corp" / "__init__.py").write_text(
            "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\n"
        )
    (tmp_path / "lib" / "corp" / "models.py").write_text("def build(config): ...\n")
    assert module_found("corp.models", [str(tmp_path / "work"), str(tmp_path / "lib")])
    assert not module_found("corp.absent", [str(tmp_path / "work"), str(tmp_path / "lib")])


def test_a_function_a_module_plainly_lacks_is_named_with_the_names_that_come_close(tmp_path: Path) -> None:
    from launcher.agent.host_python import function_missing

    (tmp_path / "train_mod.py").write_text(
        "import os.path as osp, json\nfrom typing import Any as A\nRATE = 0.1\n"
        "def train(ctx): ...\nasync def atrain(): ...\nclass Trainer: ...\n"
        "if RATE:\n    make = lambda: (late := 1)\nelse:\n    def make(): ...\n"
        "try:\n    import fastlib\nexcept ImportError as failure:\n    fastlib = None\n"
        "for idx, (left, right) in enumerate([(1, 2)]): ...\nwith open(__file__) as handle: ...\n"
        "def setup():\n    global built\n    built = 1\n"
        "match RATE:\n    case {'k': 1, **others}: ...\n    case [first, *rest]: ...\n    case captured: ...\n"
    )
    first = [str(tmp_path)]
    for bound in ("osp", "json", "A", "RATE", "train", "atrain", "Trainer", "make", "fastlib", "failure", "idx",
                  "left", "right", "handle", "built", "others", "first", "rest", "captured"):  # fmt: skip
        assert function_missing(f"train_mod:{bound}", first) is None, bound
    assert function_missing("train_mod:trian", first) == ["train", "atrain"]
    assert function_missing("train_mod:zzz_unrelated", first) == []
    assert function_missing("no_such_module_xyz:train", first) is None  # the module check names that


@pytest.mark.parametrize(
    "source",
    [
        "from helpers import *\n",
        "def __getattr__(name): ...\n",
        "globals()['trian'] = print\n",
        "import sys\nsetattr(sys.modules[__name__], 'trian', print)\n",
        "exec('def trian(): ...')\n",
        "for name in ('trian',):\n    locals()[name] = print\n",
        "def broken(:\n",  # python says what is wrong when it imports it
    ],
)
def test_a_module_that_binds_names_the_parser_cannot_see_is_never_refused(tmp_path: Path, source: str) -> None:
    from launcher.agent.host_python import function_missing

    (tmp_path / "dyn_mod.py").write_text(source)
    assert function_missing("dyn_mod:trian", [str(tmp_path)]) is None


def test_a_package_function_may_be_a_submodule_and_only_source_files_are_read(tmp_path: Path) -> None:
    from launcher.agent.host_python import function_missing

    (tmp_path / "pkg_fn").mkdir()
    (tmp_path / "pkg_fn" / "__init__.py").write_text("def build(): ...\n")
    (tmp_path / "pkg_fn" / "nets.py").write_text("")
    first = [str(tmp_path)]
    assert function_missing("pkg_fn:nets", first) is None and function_missing("pkg_fn:build", first) is None
    assert function_missing("pkg_fn:biuld", first) == ["build"]
    assert function_missing("json:no_such_fn", []) == []  # the standard library's source is read too
    assert function_missing("math:no_such_fn", []) is None  # built in: no source to read


def test_the_ports_of_one_bind_are_served_by_one_thread_until_release() -> None:
    """A host of many tasks binds each task's port; one thread takes every connection off their
    backlogs (a mesh never fills one), and `release` ends it and frees every port."""
    import socket
    import threading

    held = [socket.socket() for _ in range(20)]
    for sock in held:  # all held while chosen: a port let go may be handed out again at once
        sock.bind(("", 0))
    free = [sock.getsockname()[1] for sock in held]
    for sock in held:
        sock.close()
    before = set(threading.enumerate())
    answer = probe.handle({"op": "bind", "ports": free})
    try:
        assert set(answer["results"].values()) == {"ok"}, answer
        (accepting,) = [t for t in set(threading.enumerate()) - before if t.name == "accept"]  # one for every port
        for port in free:  # far more connections than one backlog's worth, each taken off at once
            for _ in range(3):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                    assert conn.recv(1) == b"", "the probe closes what it accepts"
    finally:
        probe.handle({"op": "release"})
    accepting.join(5)
    assert not accepting.is_alive(), "release ends the accepting thread"
    for port in free:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", port))  # released


def test_a_shebang_written_with_windows_line_endings_is_refused_as_the_kernel_refuses_it(tmp_path: Path) -> None:
    script = tmp_path / "w.sh"
    script.write_bytes(b"#!/bin/sh\r\necho hi\r\n")
    script.chmod(0o755)
    assert "its #! line names '/bin/sh\\r'" in (
        host_python.not_runnable("./w.sh", "/usr/bin:/bin", str(tmp_path)) or ""
    )
    script.write_bytes(b"#!/bin/sh\necho hi\n")
    assert host_python.not_runnable("./w.sh", "/usr/bin:/bin", str(tmp_path)) is None


def test_a_checkpoint_dir_that_is_a_link_to_nothing_cannot_be_made(tmp_path: Path) -> None:
    """makedirs would find the link there ("File exists"): the preflight refuses it, not the launch."""
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert not probe.creatable(str(tmp_path / "dangling")) and not probe.creatable(str(tmp_path / "dangling" / "sub"))
    assert probe.creatable(str(tmp_path / "new" / "sub"))
    said = f"{tmp_path / 'dangling'} -> {tmp_path / 'nowhere'}"
    assert probe.dangling_link(str(tmp_path / "dangling" / "sub")) == said
    assert probe.dangling_link(str(tmp_path / "new" / "sub")) is None
    (tmp_path / "nowhere").mkdir()
    assert probe.creatable(str(tmp_path / "dangling" / "sub"))


def test_a_module_on_pythonpath_standing_in_for_the_runtime_is_found(tmp_path: Path) -> None:
    import shutil

    from launcher.preflight.check import runtime_marks

    marks = runtime_marks()
    assert set(marks) == {"worker", "tflaunch"}
    work, lib, checkout, stale, compiled = (tmp_path / n for n in ("work", "lib", "checkout", "stale", "compiled"))
    for folder in (work, lib / "tflaunch", stale, compiled):
        folder.mkdir(parents=True)
    (work / "worker.py").write_text("mine")
    (lib / "tflaunch" / "__init__.py").write_text("mine")
    for name in probe.RUNTIME_PACKAGES:  # a checkout of this very version: the launcher's own files
        shutil.copytree(REPO / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "worker", stale / "worker", ignore=shutil.ignore_patterns("__pycache__"))
    with open(stale / "worker" / "__init__.py", "a") as tampered:  # one line more in any file: not ours
        tampered.write("print('not the runtime')\n")
    (compiled / "tflaunch.pyc").write_bytes(b"")
    assert probe.runtime_shadows(f":{lib}", str(work), marks) == {
        "worker": str(work / "worker.py"),  # the empty entry: the working directory
        "tflaunch": str(lib / "tflaunch"),
    }
    assert probe.runtime_shadows(f"{checkout}:.:{lib}", str(work), marks) == {}  # this version's checkout first
    assert probe.runtime_shadows(f"{stale}:{compiled}", str(work), marks) == {
        "worker": str(stale / "worker"),  # another version's runtime is no stand-in for this launcher's
        "tflaunch": str(compiled / "tflaunch.pyc"),
    }
    (tmp_path / "plain" / "worker").mkdir(parents=True)  # a directory of the user's: no package, not imported first
    (tmp_path / "plain" / "worker" / "notes.csv").write_text("")
    assert probe.runtime_shadows(str(tmp_path / "plain"), str(work), marks) == {}
    assert probe.runtime_shadows("", str(work), marks) == {} and probe.runtime_shadows(":", str(work), {}) == {}
