"""A validated spec's secrets, masked wherever the launcher shows or writes the spec: its env's and
hosts' env's secret values, its command's secret arguments, and the launching shell's own.

Without pydantic: it reads a spec's fields, it never validates one."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from launcher.common.masking import Redactor, redacted

if TYPE_CHECKING:
    from launcher.spec.models import ClusterSpec


def redactor_of(spec: ClusterSpec) -> Redactor:
    """The secrets of a spec: its env's and hosts' (spare hosts' too) env's secret values, and its command's;
    and those of this environment, which a local host's tasks inherit (a `DB_PASS` exported in the shell)."""
    argv = getattr(spec.training, "argv", None) or []
    envs = [os.environ, spec.env, *(host.env for host in [*spec.hosts, *spec.spare_hosts])]
    return Redactor.for_values(envs, [argv], spec.secrets)


def masked_spec(data: Any, declared: list[str] | None = None) -> Any:
    """A spec (as JSON data) with the values of secret names (known, or declared in its `secrets`),
    the current launch's secret values and every secret-looking value masked."""
    if declared is None:
        names = data.get("secrets") if isinstance(data, dict) else None
        declared = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    return Redactor(declared=declared).data(redacted(data))


def recorded_spec(spec: ClusterSpec) -> dict[str, Any]:
    """The spec as a run keeps it in spec.json: secret values masked."""
    data: dict[str, Any] = masked_spec(redactor_of(spec).data(spec.model_dump(mode="json")))
    return data
