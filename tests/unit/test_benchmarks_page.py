"""BENCHMARKS.md is what bench/figures.py renders from bench/results/: the page cannot drift from the results."""

from __future__ import annotations

import subprocess

from bench import figures
from bench.__main__ import ORDER

STALE = (
    "BENCHMARKS.md is not what bench/results/ renders: run `python -m bench.figures` once the results are "
    "committed, and commit the page"
)


def _history_complete() -> bool:
    """Whether git can name the commit that stored each results file: a checkout with its whole history."""
    try:
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=figures.ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        return False
    return shallow == "false"


def _commits_on(page: str) -> figures.CommitOf:
    """The commits the page names for the results files, for where git cannot tell them."""
    named: dict[str, str] = {}
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[-1].startswith("`python -m bench "):
            named[cells[-1].strip("`").split()[-1]] = cells[-2].rsplit(", ", 1)[-1]
    return lambda path: named.get(path.stem, figures.UNCOMMITTED)


def test_the_page_is_what_the_stored_results_render() -> None:
    page = figures.PAGE.read_text()
    commit_of = figures.committed_in if _history_complete() else _commits_on(page)
    assert page == figures.render(commit_of=commit_of), STALE


def test_every_benchmark_has_a_row() -> None:
    data = figures.load()
    assert list(figures.FIGURES) == list(ORDER)
    for name in ORDER:
        assert figures.FIGURES[name](data[name]), f"{name} has no row in BENCHMARKS.md"
