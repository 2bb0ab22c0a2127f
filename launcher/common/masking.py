"""Hide secrets wherever the launcher shows or writes something.

What is masked:

- the values the launcher knows to be secret (the closed core): the value of an environment variable
  whose name says so (by its words, such as PASSWORD, PASS, PWD, TOKEN, SECRET, KEY, PAT, JWT, also
  run together: PGPASSWORD) or that the spec declares in `secrets`; a command line's secret arguments
  (`--password X`, `--token=X`, `TOKEN=X`, `db.password=X`, the secret keys of a JSON argument); a
  URL's password (`scheme://user:PASS@host`); a PEM private-key block. `Redactor.for_values` collects
  them, and each is masked as it is and as repr(), JSON or a URL's decoding print it;
- the well-known token forms of `TOKEN_FORMS`, whatever they are called: one row per form, with one
  example it masks and one it keeps.

What is not: a secret a task got elsewhere and prints under a name of its own (`password=...`),
credential headers and cookies an HTTP library logs, a URL's query parameters, a secret changed on
its way (upper-cased, base64). Declare such a name in the spec's `secrets`, or keep it out of logs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from launcher.common.printable import printable
from launcher.common.secret_names import (
    MASK,
    MIN_MASKED,
    could_be_secret,
    is_declared,
    is_secret,
    names_secret_argument,
)
from launcher.common.token_forms import ANY_FORM, TOKEN_FORMS, credential_like

__all__ = [
    "PemLines",
    "Redactor",
    "looks_secret",
    "mask_env",
    "mask_value",
    "redact",
    "redacted",
    "secret_arguments",
    "set_secrets",
    "without_password",
]


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_BLOCK = re.compile(rf"{_PEM_BEGIN.pattern}[\s\S]*?(?:{_PEM_END.pattern}|$)")
# scheme://user:PASSWORD@host, the password up to the last @ of the word (it may hold / or @). A
# scheme starts only where no scheme character precedes it, and every part is bounded: linear in
# any line (a 64 KiB line of letters took seconds with unbounded parts tried at every position).
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]{0,31}://[^/\s:@]{0,255}:)(\S{1,1024})@")
_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.\-]*)(?:[=:](.*))?$", re.S)  # --token=X, --token X, --token:X
# A positional NAME=VALUE (`TOKEN=X`, Hydra's `db.password=X`, `+db.password=X`, `++db.password=X`).
_ASSIGNMENT = re.compile(r"^\+{0,2}([A-Za-z_][A-Za-z0-9_.\-]*)=(.+)$", re.S)


def looks_secret(value: str) -> bool:
    """Whether a value is a secret by its form, whatever it is called."""
    return bool(_PEM_BLOCK.search(value) or _URL_PASSWORD.search(value)) or any(
        form.pattern.search(value) for form in TOKEN_FORMS
    )


def _secret_parts(value: str) -> list[str]:
    """The secrets in `value` by their form, each alone: `--msg "push with ghp_..."` hides the token,
    not the words around it."""
    found = [block.group() for block in _PEM_BLOCK.finditer(value)]
    found += [secret for form in TOKEN_FORMS for secret in form.secrets(value)]
    return found + [match[2] for match in _URL_PASSWORD.finditer(value) if credential_like(match[2])]


def _patterns(text: str) -> str:
    if "-----BEGIN" in text:
        text = _PEM_BLOCK.sub(MASK, text)
    if ANY_FORM.search(text):
        for form in TOKEN_FORMS:
            text = form.mask(text)
    return _URL_PASSWORD.sub(rf"\g<1>{MASK}@", text) if "://" in text else text


def without_password(address: str) -> str:
    """`user:password@host` as `user:****@host`, as ssh's forms may carry one (a URL's is masked by pattern)."""
    login, at, host = address.rpartition("@")
    if not at or ":" not in login:
        return address
    return f"{login.split(':', 1)[0]}:{MASK}@{host}"


def mask_value(name: str, value: str, declared: Iterable[str] = ()) -> str:
    """The whole value for a secret name; otherwise the secret-looking parts of it."""
    return MASK if is_secret(name, declared) else _patterns(value)


def mask_env(env: Mapping[str, str], declared: Iterable[str] = ()) -> dict[str, str]:
    return {key: mask_value(key, value, declared) for key, value in env.items()}


def secret_arguments(argv: Sequence[str], declared: Iterable[str] = (), _depth: int = 0) -> list[str]:
    """The values in a command line that are secrets: `--token=X`, `--api-key X`, `--token:X`, a word
    `TOKEN=X` or `db.password=X` (an override, as Hydra takes them), or secret-looking."""
    found: list[str] = []
    for index, arg in enumerate(argv):
        match = _FLAG.match(arg)
        assignment = None if match else _ASSIGNMENT.match(arg)
        if match and names_secret_argument(match[1], declared):
            value = match[2] if match[2] is not None else (argv[index + 1] if index + 1 < len(argv) else "")
            if _taken_value(value) and (is_declared(match[1], declared) or could_be_secret(value)):
                found.append(value)
        elif assignment and names_secret_argument(assignment[1], declared):
            if is_declared(assignment[1], declared) or could_be_secret(assignment[2]):
                found.append(assignment[2])
        else:
            found.extend(_secret_parts(arg))  # postgres://u:X@h/db: the password, not the whole URL
        value = match[2] if match and match[2] else assignment[2] if assignment else arg
        if value.lstrip().startswith("{"):  # --config '{"password": ...}', --cfg={...}, cfg={...}
            found.extend(_secrets_in_json(value, declared))
        if match and match[2] and not names_secret_argument(match[1], declared) and _ASSIGNMENT.match(match[2]):
            found.extend(secret_arguments([match[2]], declared))  # --env=HF_TOKEN=X, --set=db.password=X
        if _depth == 0 and any(space in arg for space in " \t\n"):  # `bash -c '... --token=X'`, "--opts PASS=X"
            found.extend(secret_arguments(arg.split(), declared, _depth=1))
    return list(dict.fromkeys(found))


def _secrets_in_json(text: str, declared: Iterable[str]) -> list[str]:
    """The string values of secret names in a JSON object given as one argument (nested too)."""
    found: list[str] = []

    def secret_values(item: dict[str, Any]) -> dict[str, Any]:
        found.extend(
            value
            for key, value in item.items()
            if isinstance(value, str) and names_secret_argument(key, declared) and could_be_secret(value)
        )
        return item

    try:
        json.loads(text, object_hook=secret_values)
    except (ValueError, RecursionError):
        return []
    return found[:1000]


def _taken_value(value: str) -> bool:
    """Whether the word after a secret flag is its value: not empty, and not another flag (`--next`, `-v`);
    a generated password may start with a dash (`-Xy7...`)."""
    return bool(value) and not value.startswith("--") and not (value.startswith("-") and len(value) <= 2)


def _printed_forms(value: str) -> set[str]:
    """`value`, and how a script that prints it through repr() or json.dumps() writes it, or decoded
    from a URL (`sig=AbC%2Bdef` is printed as `AbC+def` by a script that parsed its URL)."""
    forms = {value, repr(value)[1:-1], json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    if "%" in value or "+" in value:
        from urllib.parse import unquote, unquote_plus

        forms |= {unquote(value), unquote_plus(value)}
    return forms


class PemLines:
    """Masks the body of a private key printed one line at a time: every line from a BEGIN ...
    PRIVATE KEY line to its END line (a per-line pattern sees only the BEGIN line). One per stream."""

    def __init__(self) -> None:
        self._inside = False

    def line(self, text: str) -> str:
        if _PEM_BEGIN.search(text):
            self._inside = not _PEM_END.search(text)
            return text
        if self._inside:
            end = _PEM_END.search(text)
            if end is not None:
                self._inside = False
                return MASK + text[end.start() :]
            return MASK
        return text


class Redactor:
    """Masks the literal secret values of one spec, and every token form, in any text."""

    def __init__(self, literals: Iterable[str] = (), declared: Iterable[str] = ()) -> None:
        self.declared = frozenset(declared)
        forms = {form for value in literals for form in _printed_forms(value)}  # as repr() or JSON show it too
        kept = sorted({v for v in forms if len(v) >= MIN_MASKED}, key=len, reverse=True)
        self._literals = re.compile("|".join(re.escape(v) for v in kept)) if kept else None

    @classmethod
    def for_values(
        cls, envs: Iterable[Mapping[str, str]], argvs: Iterable[Sequence[str]], declared: Iterable[str] = ()
    ) -> Redactor:
        declared = frozenset(declared)
        literals: list[str] = []
        for env in envs:
            for key, value in env.items():
                if is_secret(key, declared) and (is_declared(key, declared) or could_be_secret(value)):
                    literals.append(value)
                    literals.extend(line for line in value.splitlines() if len(line) >= 16)  # PEM bodies
                else:
                    literals.extend(_secret_parts(value))  # DATA_URL=https://u:X@h/data: printed alone
        for argv in argvs:
            literals.extend(secret_arguments(argv, declared))
        return cls(literals, declared)

    def text(self, text: str) -> str:
        masked = self._masked(text)
        if self._literals is not None and (plain := printable(masked)) != masked:
            # a secret split by a colour, cursor or title code, or a NUL, shows whole once they are gone: then
            # the line is given as a screen shows it, the secret masked
            if self._literals.search(plain):
                return self._masked(plain)
        return masked

    def _masked(self, text: str) -> str:
        if self._literals is not None:
            text = self._literals.sub(MASK, text)
        return _patterns(text)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {key: MASK if is_secret(key, self.declared) else self.text(value) for key, value in env.items()}

    def argv(self, argv: Sequence[str]) -> list[str]:
        return [self.text(arg) for arg in argv]

    def data(self, data: Any, key: str = "") -> Any:
        """JSON-like data with every string redacted, and the values of secret names in any mapping masked."""
        if isinstance(data, dict):
            return {
                k: MASK if isinstance(v, str) and is_secret(str(k), self.declared) else self.data(v, str(k))
                for k, v in data.items()
            }
        if isinstance(data, list):
            return [self.data(item, key) for item in data]
        if isinstance(data, str):
            return self.text(data)
        return data


_current = Redactor()


def set_secrets(redactor: Redactor) -> None:
    """The launch's secrets, for everything it shows or writes from now on (one launch per process)."""
    global _current
    _current = redactor


def redact(text: str) -> str:
    """`text` with the current launch's secrets and every token form masked."""
    return _current.text(text)


def redacted(data: Any) -> Any:
    """JSON-like data redacted by the current launch's secrets (see `Redactor.data`)."""
    return _current.data(data)
