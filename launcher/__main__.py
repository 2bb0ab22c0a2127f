"""`python -m launcher`: the same as the `launch` command.

`python -m` puts the working directory first on sys.path, where a user's own `worker.py` (or
`tflaunch.py`) would stand in for the launcher's packages beside it. The launcher imports no module
of the user's, so the folder holding its packages takes that place, as the `launch` command has it."""

import os
import sys

if sys.path and os.path.abspath(sys.path[0] or ".") == os.getcwd():
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from launcher.cli.entry_point import entry  # noqa: E402  (after the path is set)

entry()
