"""`python -m launcher` is the same as the `launch` command."""

from launcher.cli import main

raise SystemExit(main())
