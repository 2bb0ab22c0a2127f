"""`python -m launcher`: the same as the `launch` command."""

from launcher.cli import entry

entry()
