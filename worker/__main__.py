"""`python -m worker`: run the worker runtime for the task described by TF_CONFIG."""

from worker.runtime import main

raise SystemExit(main())
