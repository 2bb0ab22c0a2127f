"""The run's record files (metrics.jsonl, eval.jsonl), written by the launcher from the rows tasks report.

A chief on another host reports its rows on the event channel; the launcher appends them to its
own run directory, so the files are complete wherever the tasks ran and whatever storage they share.
"""

from __future__ import annotations

import json
from typing import IO, Any

from launcher.common.masking import redacted
from launcher.common.private_files import make_private_dir, open_private
from worker.contract import RECORD_STREAMS, RunLayout


class RecordFiles:
    """Appends rows to the run's record files, opened on first use and closed by `close()`."""

    def __init__(self, run_dir: str) -> None:
        self._layout = RunLayout(run_dir)
        self._files: dict[str, IO[Any]] = {}

    def append(self, report: dict[str, Any]) -> None:
        stream, row = report.get("stream"), report.get("row")
        if stream not in RECORD_STREAMS or not isinstance(row, dict):
            return  # not a row of a stream we keep: ignore rather than corrupt a file
        handle = self._files.get(str(stream))
        if handle is None:
            make_private_dir(self._layout.run_dir)
            handle = self._files[str(stream)] = open_private(self._layout.record_file(str(stream)), "a")
        handle.write(json.dumps(redacted(row), default=str) + "\n")  # a row may quote a secret, as a line may
        handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()
