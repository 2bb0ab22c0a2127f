"""`python -m worker`: run the worker runtime for the task described by TF_CONFIG."""

from worker.forked_spare import fork_after_import

fork_after_import()  # only when the host's agent asked for a spare: worker/forked_spare.py

from worker.runtime import main  # noqa: E402 - after the fork, which a spare must see first

raise SystemExit(main())
