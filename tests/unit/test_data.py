"""Input pipeline checks that need no TensorFlow."""

import pytest

from worker.data import DataShardingError, check_file_shards


def test_fewer_files_than_workers_is_a_clear_error() -> None:
    with pytest.raises(DataShardingError, match="2 file\\(s\\) matching 'data-\\*' for 3 workers"):
        check_file_shards(["data-0", "data-1"], 3, "data-*")
    check_file_shards(["a", "b", "c"], 3)
