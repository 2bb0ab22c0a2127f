"""One planning run in a fresh interpreter, for bench/fleet.py: read, validate and plan a spec.

    python -m bench.fleet_plan SPEC.json

Prints one JSON line: seconds to import the planner, to decode the file, to validate it
(`parse_spec`) and to build the plan (`build_plan`), and the peak RSS (VmHWM) once the modules
were imported and at the end. Imports nothing but the planner and the standard library, so the
RSS after the imports is that of an interpreter that only imported the modules.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def _peak_kib() -> int:
    """This process's own high-water mark (VmHWM). Not ru_maxrss: Linux carries that across exec
    from the parent that forked it, so under a large `python -m bench` it reads the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux; no /proc here


def main() -> None:
    began = time.perf_counter()
    from launcher.plan import PlanInputs, build_plan
    from launcher.spec.load import parse_spec
    from launcher.spec.strict_json import decode_json, decode_text

    imported = time.perf_counter()
    imported_kib = _peak_kib()
    path = Path(sys.argv[1])
    text, problems = decode_text(path.read_bytes())
    assert text is not None and not problems, problems
    data, problems = decode_json(text)
    assert not problems, problems
    decoded = time.perf_counter()
    spec = parse_spec(data, str(path))
    validated = time.perf_counter()
    run_dir = str(Path(spec.run_root) / spec.name)
    plan = build_plan(spec, PlanInputs(run_dir, 0, sys.executable, str(path.parent)))
    built = time.perf_counter()
    result = {
        "tasks": len(plan.tasks),
        "import_s": imported - began,
        "decode_s": decoded - imported,
        "validate_s": validated - decoded,
        "build_s": built - validated,
        "imported_kib": imported_kib,
        "peak_kib": _peak_kib(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
