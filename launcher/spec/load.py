"""Reading a cluster spec: a file or standard input, strictly decoded, validated into a ClusterSpec,
with every problem reported at once (exit 2); and the JSON Schema the models generate."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from launcher.common.errors import SpecError, SpecProblem
from launcher.common.printable import escaped
from launcher.spec.limits import MAX_SPEC_BYTES
from launcher.spec.messages import problems_beside_a_misspelt_kind, problems_of, shown, with_help
from launcher.spec.models import HOSTS_LATER, ClusterSpec
from launcher.spec.secrets import redactor_of_raw
from launcher.spec.sources import STDIN_NAME
from launcher.spec.strict_json import decode_json, decode_text, raw_problems

SCHEMA_KEY = "$schema"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of cluster.json, generated from the models (plus `$schema`, which editors
    use to attach it to a file and the reader ignores)."""
    schema = ClusterSpec.model_json_schema()
    schema["properties"] = {
        SCHEMA_KEY: {"type": "string", "description": "the JSON Schema this file follows (for editors); ignored"},
        **schema["properties"],
    }
    return schema


HostsFrom = Callable[[ClusterSpec], list[dict[str, Any]] | None]  # None: a spec without hosts (sbatch)


def parse_spec(data: Any, source: str = "cluster spec", hosts_from: HostsFrom | None = None) -> ClusterSpec:
    """Validate already-decoded JSON; raise SpecError listing every problem.

    `hosts_from` (Slurm): the spec is first validated without hosts, then with the host entries
    it returns for that spec (they replace any `hosts` the file has)."""
    if not isinstance(data, dict):
        raise SpecError(source, [SpecProblem("$", f"the spec must be a JSON object, got {shown(data)}")])
    if isinstance(data.get(SCHEMA_KEY), str):  # how editors attach a schema; not part of the spec
        data = {key: value for key, value in data.items() if key != SCHEMA_KEY}
    problems = raw_problems(data)
    if problems:  # a message quotes what the user wrote, secrets included
        hide = redactor_of_raw(data)
        raise SpecError(source, [with_help(SpecProblem(p.path, hide.text(p.message))) for p in problems])
    try:
        if hosts_from is None:
            return ClusterSpec.model_validate(data)
        first = ClusterSpec.model_validate({**data, "hosts": []}, context={HOSTS_LATER: True})
        hosts = hosts_from(first)
        if hosts is None:
            return first
        # an allocation with more nodes than the spec's slurm.nodes: the nodes beyond them are spares
        slurm = first.slurm
        sized = slurm is not None and ("nodes" in slurm.model_fields_set or slurm.spare_nodes > 0)
        kept = min(slurm.nodes, len(hosts)) if slurm is not None and sized else len(hosts)
        return ClusterSpec.model_validate({**data, "hosts": hosts[:kept], "spare_hosts": hosts[kept:]})
    except ValidationError as error:
        problems = problems_of(error) + problems_beside_a_misspelt_kind(data, error)
        hide = redactor_of_raw(data)  # a message quotes what the user wrote, secrets included
        raise SpecError(source, [SpecProblem(p.path, hide.text(p.message)) for p in problems]) from None


_EXAMPLE = "cluster.example.json"


def _start_from(missing: Path) -> str:
    """How to get a spec where `missing` is not: the project's example beside it to copy, or the flags."""
    import shlex

    example = missing.parent / _EXAMPLE
    try:
        beside = missing.suffix == ".json" and missing.name != _EXAMPLE and example.is_file()
    except OSError:  # a path at the length limit: the example's is over it
        beside = False
    if beside:
        target = os.path.join(".", missing) if missing.name.startswith("-") else str(missing)  # not an option
        copy = f"cp {shlex.quote(str(example))} {shlex.quote(target)}"
        return f" (to start from the example beside it: {escaped(copy)})"
    return " (or launch without one: launch --local 2 [-- python3 train.py])"


def load_spec(path: Path | None, hosts_from: HostsFrom | None = None) -> ClusterSpec:
    """Read and validate a cluster.json file (None: standard input, `--cluster -`); raise SpecError
    (exit 2) on any problem."""
    name, where = (escaped(str(path)), "; check the --cluster path") if path is not None else (STDIN_NAME, "")
    try:
        if path is None:
            if sys.stdin.isatty():  # else the launcher would seem to hang at a prompt
                print("[launch] reading the cluster spec from standard input (end it with Ctrl-D)", file=sys.stderr)
            raw = sys.stdin.buffer.read(MAX_SPEC_BYTES + 1)
        else:
            with path.open("rb") as handle:  # bounded: /dev/zero or a huge file is refused, not read until memory ends
                raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as error:
        what = "the file" if path is not None else "standard input"
        if path is not None and isinstance(error, FileNotFoundError):
            where += _start_from(path)
        raise SpecError(name, [SpecProblem("$", f"cannot read {what} ({error.strerror}){where}")]) from None
    if len(raw) > MAX_SPEC_BYTES:
        big = f"larger than {MAX_SPEC_BYTES // 2**20} MiB, which no cluster spec is{where}"
        raise SpecError(name, [SpecProblem("$", big)])
    text, problems = decode_text(raw)
    if text is not None:
        data, problems = decode_json(text)
    if problems:
        raise SpecError(name, problems)
    return parse_spec(data, name, hosts_from)
