"""`launch export k8s`: one spec, rendered for the engine a Kubernetes cluster runs.

Pure up to `write`: rendering reads no cluster and no environment; `write` only creates the output
directory and its YAML files. Secret values of the spec's env never reach the output, and no value
of the spec or the command line can change its structure: each is written as an escaped YAML
scalar (in the head comments too) and, where the kubelet expands `$(VAR)`, with every `$` doubled.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.common.errors import UsageError
from launcher.k8s import jobset, tfjob
from launcher.k8s.layout import Export, ExportOptions, task_groups
from launcher.k8s.yaml_text import documents, scalar
from launcher.spec.models import ClusterSpec
from worker.files import new_temporary

# The file of each engine's own object: one directory holds the manifests of one engine only.
ENGINE_FILES = ("jobset.yaml", "tfjob.yaml")
# Every file an export may write: one left from an earlier export would be applied with the new ones.
EXPORT_FILES = (*ENGINE_FILES, "claim.yaml", "network-policy.yaml")
_MANIFEST_MODE = 0o644  # no secret is ever written into a manifest; kubectl and CI read them


def export(spec: ClusterSpec, options: ExportOptions, source: str) -> Export:
    """The manifests for `options.format`; UsageError or SpecError for what cannot be expressed."""
    options.check()
    groups = task_groups(spec, source)
    render = tfjob.render if options.format == "tfjob" else jobset.render
    result = render(spec, groups, options)
    head = f"Written by `launch export k8s --format {options.format}` from {scalar(source)}."
    warnings = result.warnings
    if spec.spare_hosts:  # what spares do on a host list, the scheduler does here with any node that fits
        warnings = (
            *warnings,
            "spare_hosts are not exported: Kubernetes restarts the pods of a lost node on any node that fits "
            "(have spare capacity in the node pool)",
        )
    return Export(result.manifests, (head, *result.comments), warnings)


def text(result: Export) -> str:
    """Every manifest in one YAML stream, the comments first."""
    return documents([manifest for _, manifest in result.manifests], result.comments)


def write(result: Export, directory: Path) -> list[Path]:
    """One file per manifest in `directory` (created if missing); the paths written.

    UsageError, naming `-o`, when the directory cannot be written, or already holds the other
    engine's manifest or a file of an earlier export that this one does not write: `kubectl apply -f
    DIR` would apply those too. All or nothing: every file is written under a temporary name first
    and moved into place only when all were written."""
    names = [file_name for file_name, _ in result.manifests]
    if directory.is_dir():
        other = sorted(name for name in ENGINE_FILES if name not in names and (directory / name).exists())
        if other:
            raise UsageError(
                f"Got -o {directory}: it already holds {', '.join(other)}, written for another engine; "
                f"`kubectl apply -f {directory}` would start both on one run directory. Remove it, or give "
                f"another -o directory."
            )
        stale = sorted(name for name in EXPORT_FILES if name not in names and (directory / name).exists())
        if stale:
            raise UsageError(
                f"Got -o {directory}: it holds {', '.join(stale)} from an earlier export, which this one does not "
                f"write; `kubectl apply -f {directory}` would apply it too. Remove it, or give another -o directory."
            )
        blocked = [name for name in names if (directory / name).exists() and not (directory / name).is_file()]
        if blocked:
            raise UsageError(
                f"Got -o {directory}: {', '.join(blocked)} there is not a file; remove it, or give another "
                "-o directory."
            )
    written: list[tuple[str, Path]] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for file_name, manifest in result.manifests:
            fd, temporary = new_temporary(str(directory / file_name), _MANIFEST_MODE)
            written.append((temporary, directory / file_name))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(documents([manifest], result.comments))
        for temporary, path in written:
            os.replace(temporary, path)
    except OSError as error:  # no permission, a full disk
        for temporary, _ in written:
            Path(temporary).unlink(missing_ok=True)
        raise UsageError(
            f"Got -o {directory}: cannot write the manifests there ({error.strerror or error}); give a "
            f"directory this user can write."
        ) from error
    return [path for _, path in written]
