"""Where a run lives and who may touch it: the lock, resume and --fresh, checkpoint marks, the report
and summary, and `launch status`, `logs`, `stop` and `bundle`. It never starts a task."""
