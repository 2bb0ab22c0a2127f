"""`launch schema`, `launch export k8s` and `launch slurm submit`: the subcommands that render a spec
for another engine (or the spec's own schema) instead of running it.

Each loads what it renders with (pydantic, the Kubernetes layout, Slurm's batch script) when it is the
one asked for: `launch status` and `launch` itself pay for none of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from launcher.cli.request import LaunchRequest, request_spec
from launcher.common import exit_codes
from launcher.common.errors import UsageError
from launcher.common.masking import redact
from launcher.common.printable import printable
from launcher.rundir.place import place_of


def _request(args: argparse.Namespace, command: list[str]) -> LaunchRequest:
    """A subcommand's spec comes from --cluster (required), renamed or moved by --name and --run-root."""
    return LaunchRequest(args.cluster, None, (), args.name, args.run_root, tuple(command))


def _is_our_schema(path: Path) -> bool:
    """Whether `path` holds a schema `launch schema` wrote (an older one, too): only such a file is replaced."""
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(16 * 2**20))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("title") == "ClusterSpec" and "$defs" in data and "hosts" not in data


def schema(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.spec.load import json_schema  # pydantic (~70 ms): see the module's docstring

    output = args.output

    text = json.dumps(json_schema(), indent=2) + "\n"
    if output is None or output == "-":
        print(text, end="")
        return exit_codes.SUCCEEDED

    target = Path(output)
    if target.exists() and target.stat().st_size > 0 and not _is_our_schema(target):  # an empty file holds nothing
        raise UsageError(
            f"{output} already exists and is not a schema this command wrote (a spec, say); remove it or give "
            "another file with -o. Nothing was written."
        )
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"Cannot write {output}: {error.strerror}.") from None
    print(f"wrote {output}")
    return exit_codes.SUCCEEDED


def slurm(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.slurm import submit as slurm  # pydantic (~70 ms): see the module's docstring

    spec = request_spec(_request(args, command), lambda first: None)
    print_only, wait = args.print, args.wait

    run_dir = Path(place_of(spec).run_dir)
    if print_only:
        print(slurm.batch_script(spec, run_dir / "submitted-spec.json", run_dir), end="")
        return exit_codes.SUCCEEDED
    script = slurm.write_job(spec, run_dir)
    job_id = slurm.submit(script)
    output = run_dir / f"slurm-{job_id}.out"
    print(f"[launch] submitted Slurm job {job_id}: script {script}, output {output}", flush=True)

    def say(text: str) -> None:
        print(f"[launch] {text}", flush=True)

    fields = slurm.wait_started(job_id, spec.restart.start_timeout_s, say)
    say(f"job {job_id} is {fields.get('JobState', '?').lower()} on {fields.get('NodeList', '?')}")
    if not wait:
        return exit_codes.SUCCEEDED
    return slurm.follow(job_id, output, say, lambda line: print(printable(redact(line)), flush=True))


def export(args: argparse.Namespace, command: list[str]) -> int:
    from launcher.k8s.cli_args import export_options  # pydantic (~70 ms): see the module's docstring
    from launcher.k8s.export import export, text, write  # likewise

    request = _request(args, command)
    spec, options, source, output = request_spec(request), export_options(args), request.described, args.output

    result = export(spec, options, source)
    written = write(result, Path(output)) if output is not None else []  # a refusal warns of nothing
    if result.warnings:  # once, here; the YAML repeats them as comments
        print(f"launch: with --format {options.format}, these guarantees of the launcher do not hold:", file=sys.stderr)
        for line in result.warnings:
            print(f"  - {line}", file=sys.stderr)
    if output is None:
        print(text(result), end="")
    for path in written:
        print(f"wrote {path}")
    return exit_codes.SUCCEEDED
