"""Where a spec comes from, as messages name it: a file, or standard input (`--cluster -`).

Without pydantic: the command line reads these names before it knows whether it will validate."""

STDIN_FLAG = "-"  # `--cluster -`: the spec comes on standard input (`./-` names a file called -)
STDIN_NAME = "standard input"  # how messages name a spec given so
