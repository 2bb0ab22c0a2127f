"""The `launch` command's entry point (`python -m launcher` too): a Ctrl-C that comes while the
command's modules load (its first ~60 ms) ends it with 130, as a later one does, not
with a traceback. Such an interrupt can surface as another exception: one that stops pydantic-core
loading the `datetime` module becomes a PanicException. Only Python's own start-up, before any of
our code runs, is beyond this."""

from __future__ import annotations

import signal
from types import FrameType

INTERRUPTED = 130  # 128 + SIGINT, as launcher.common.exit_codes.INTERRUPTED (not imported: it must load nothing)


class _Interrupts:
    seen = False


def _interrupted(signum: int, frame: FrameType | None) -> None:
    _Interrupts.seen = True
    raise KeyboardInterrupt


def entry() -> None:
    """Run the command; what an early Ctrl-C raised ends it with INTERRUPTED. While a launch runs, its
    own handlers take SIGINT (launcher/run.py) and say what was stopped. Once the command has ended,
    however it ended, a Ctrl-C is ignored: it could only turn the exit into a traceback."""
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # not where SIGINT is ignored (a
    if ours:  # script's background job): that stays so
        signal.signal(signal.SIGINT, _interrupted)
    try:
        from launcher.cli.main import entry as run  # here: a Ctrl-C while the command loads is caught

        run()
    except BaseException as error:
        if ours:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if isinstance(error, SystemExit) or not (_Interrupts.seen or isinstance(error, KeyboardInterrupt)):
            raise
        raise SystemExit(INTERRUPTED) from None  # quietly, as launcher.cli.main.main ends on a KeyboardInterrupt
