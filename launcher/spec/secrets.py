"""What in a spec is secret: the checks of its env and secrets fields, and the masking of a spec
that did not validate (its raw JSON), for the messages that quote it. Without pydantic."""

from __future__ import annotations

import re
from typing import Any

from launcher.common.masking import Redactor
from launcher.common.secret_names import MIN_MASKED, is_declared
from worker.contract import ENV_PREFIX

# Linux takes one environment string ("KEY=VALUE" and its NUL) of at most 32 pages (MAX_ARG_STRLEN).
MAX_ENV_STRING_BYTES = 32 * 4096
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env(env: dict[str, str], where: str) -> list[tuple[str, str]]:
    problems = []
    for key in env:
        if not _ENV_KEY.fullmatch(key):
            problems.append(
                (
                    f"{where}.{key}",
                    "an environment variable name is letters, digits and _ and does not start with a digit",
                )
            )
        elif key == "TF_CONFIG" or key.startswith(ENV_PREFIX):
            problems.append(
                (
                    f"{where}.{key}",
                    f"TF_CONFIG and {ENV_PREFIX}* are set by the launcher for each task; remove this key",
                )
            )
        elif (size := len(f"{key}={env[key]}".encode("utf-8", "surrogateescape")) + 1) > MAX_ENV_STRING_BYTES:
            problems.append(
                (
                    f"{where}.{key}",
                    f"is {size // 1024} KiB; Linux takes at most {MAX_ENV_STRING_BYTES // 1024} KiB in one environment "
                    "variable (a longer one fails every task's start): put the data in a file and give its path",
                )
            )
    return problems


_SECRET_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_secrets(secrets: list[str], envs: list[tuple[str, dict[str, str]]]) -> list[tuple[str, str]]:
    """A declared secret must be a name, and a value it names long enough to be masked."""
    problems = [
        (
            f"secrets[{i}]",
            f"{name!r} is not a variable or flag name: letters, digits, '_', '-' and '.' (a flag without its dashes)",
        )
        for i, name in enumerate(secrets)
        if not _SECRET_NAME.fullmatch(name)
    ]
    for where, env in envs:
        for key, value in env.items():
            if 0 < len(value) < MIN_MASKED and is_declared(key, secrets):
                problems.append(
                    (
                        f"{where}.{key}",
                        f"is listed in secrets, but its value has {len(value)} character(s): one shorter than "
                        f"{MIN_MASKED} cannot be masked in output without hiding ordinary text; use a longer value, "
                        f"or take {key} out of secrets",
                    )
                )
    return problems


def redactor_of_raw(data: dict[str, Any]) -> Redactor:
    """The masking of a spec that did not validate: its env values under secret names (top level and
    every host's) and its command's secret arguments (an argv written as one string is split)."""

    def strings(mapping: object) -> dict[str, str]:
        return {k: v for k, v in mapping.items() if isinstance(v, str)} if isinstance(mapping, dict) else {}

    def listed(value: object) -> list[Any]:
        return value if isinstance(value, list) else []

    envs = [
        strings(data.get("env")),
        *(strings(h.get("env")) for h in listed(data.get("hosts")) if isinstance(h, dict)),
        *(strings(h.get("env")) for h in listed(data.get("spare_hosts")) if isinstance(h, dict)),
    ]
    training = data.get("training")
    argv = training.get("argv") if isinstance(training, dict) else None
    words = argv.split() if isinstance(argv, str) else [a for a in listed(argv) if isinstance(a, str)]
    declared = [name for name in listed(data.get("secrets")) if isinstance(name, str)]
    return Redactor.for_values(envs, [words], declared)
