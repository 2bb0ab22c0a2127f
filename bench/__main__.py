"""`python -m bench [--quick] [NAME ...]`: run the benchmarks, print their tables, keep raw JSON.

Tables also go to bench/results/latest.md; raw numbers to bench/results/<name>.json. A run that is
not --quick ends by rewriting BENCHMARKS.md from the stored results (bench/figures.py).
"""

from __future__ import annotations

import argparse
import compileall
import importlib
import time
from pathlib import Path

from bench import figures
from bench.common import ORDER, RESULTS, machine


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="fewer pairs and shorter jobs (under 3 minutes)")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"a subset of: {', '.join(ORDER)}")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(ORDER))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(ORDER)}")
    # as an install leaves them: edits since (under PYTHONDONTWRITEBYTECODE) would be compiled at every start
    root = Path(__file__).resolve().parent.parent
    for package in ("launcher", "worker", "tflaunch"):
        compileall.compile_dir(root / package, quiet=1)
    started = time.monotonic()
    sections = [f"Machine: {machine()}; mode: {'quick' if args.quick else 'full'}"]
    for name in args.names or ORDER:
        began = time.monotonic()
        section = importlib.import_module(f"bench.{name}").run(args.quick)
        print(section + f"\n\n({name}: {time.monotonic() - began:.0f} s)\n", flush=True)
        sections.append(section)
    sections.append(f"Total: {time.monotonic() - started:.0f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / ("latest-quick.md" if args.quick else "latest.md")).write_text("\n\n".join(sections) + "\n")
    print(sections[-1])
    if not args.quick:  # the page shows full runs only (a quick run's numbers go to <name>-quick.json)
        print(f"Rewrote {figures.write().relative_to(root)} from {RESULTS.relative_to(root)}")


if __name__ == "__main__":
    main()
