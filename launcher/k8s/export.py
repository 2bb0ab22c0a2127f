"""`launch export k8s`: one spec, rendered for the engine a Kubernetes cluster runs.

Pure up to `write`: rendering reads no cluster and no environment; `write` only creates the output
directory and its YAML files. Secret values of the spec's env never reach the output.
"""

from __future__ import annotations

from pathlib import Path

from launcher.k8s import jobset, tfjob
from launcher.k8s.layout import Export, ExportOptions, task_groups
from launcher.k8s.yaml_text import documents
from launcher.spec import ClusterSpec


def export(spec: ClusterSpec, options: ExportOptions, source: str) -> Export:
    """The manifests for `options.format`; UsageError or SpecError for what cannot be expressed."""
    options.check()
    groups = task_groups(spec, source)
    render = tfjob.render if options.format == "tfjob" else jobset.render
    result = render(spec, groups, options)
    head = f"Written by `launch export k8s --format {options.format}` from {source}."
    return Export(result.manifests, (head, *result.comments), result.warnings)


def text(result: Export) -> str:
    """Every manifest in one YAML stream, the comments first."""
    return documents([manifest for _, manifest in result.manifests], result.comments)


def write(result: Export, directory: Path) -> list[Path]:
    """One file per manifest in `directory` (created if missing); the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for file_name, manifest in result.manifests:
        path = directory / file_name
        path.write_text(documents([manifest], result.comments), encoding="utf-8")
        paths.append(path)
    return paths
