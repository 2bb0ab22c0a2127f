"""The `launch` entry point ends an early Ctrl-C with 130, whatever exception it surfaced as."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

import launcher.cli.main
from launcher.cli import entry_point
from launcher.common import exit_codes


class _Panic(BaseException):
    """As pyo3's PanicException: what pydantic-core raises when a Ctrl-C stops its import of `datetime`."""


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(entry_point._Interrupts, "seen", False)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)  # entry() leaves Ctrl-C ignored, as the process ends


def test_an_interrupt_surfacing_as_another_exception_ends_with_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted_while_loading() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, at the next bytecode
        except KeyboardInterrupt:
            raise _Panic("failed to import `datetime` C API") from None

    monkeypatch.setattr(launcher.cli.main, "entry", interrupted_while_loading)
    with pytest.raises(SystemExit) as ended:
        entry_point.entry()
    assert ended.value.code == exit_codes.INTERRUPTED == entry_point.INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a second Ctrl-C cannot turn the exit into a traceback


def test_without_an_interrupt_an_error_stays_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise _Panic("a real bug")

    monkeypatch.setattr(launcher.cli.main, "entry", broken)
    with pytest.raises(_Panic):
        entry_point.entry()
    monkeypatch.setattr(launcher.cli.main, "entry", lambda: (_ for _ in ()).throw(SystemExit(3)))
    with pytest.raises(SystemExit) as ended:
        entry_point.entry()
    assert ended.value.code == 3


def test_an_ignored_sigint_stays_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(launcher.cli.main, "entry", lambda: seen.append(signal.getsignal(signal.SIGINT)))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        entry_point.entry()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert seen == [signal.SIG_IGN]


def test_after_the_command_a_ctrl_c_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher.cli.main, "entry", lambda: (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit) as ended:
        entry_point.entry()
        raise AssertionError("entry() ends by SystemExit")
    os.kill(os.getpid(), signal.SIGINT)  # ignored: no KeyboardInterrupt on the way out
    assert ended.value.code == 0
