"""Hide secrets wherever the launcher shows or writes something, and keep the screen text only.

A value is secret when its name says so (name tokens split on `_`, `-`, `.` and case changes, such
as PASSWORD, PASS, PWD, TOKEN, SECRET, KEY, PAT, JWT, WEBHOOK..., minus an allow-list of known
non-secrets such as TOKENIZERS_PARALLELISM), when the spec declares its name in `secrets`, or when
the value looks like one (a PEM private key, GitHub/Hugging Face/OpenAI/Slack tokens, AWS access key
ids, JWTs, `AccountKey=`, `Bearer ...`, Slack webhooks, a password inside a URL, the value of a
credential header such as `X-Api-Key:` or `Cookie:`).
`Redactor` holds the literal secret values of one spec and masks them, and every pattern above, in
any text: the dry run, spec.json, summary and status, the failure report, validation errors and the
bundle all go through it. `printable` strips terminal control sequences from what reaches a screen.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "MASK",
    "PemLines",
    "Redactor",
    "escaped",
    "is_secret",
    "looks_secret",
    "mask_env",
    "mask_value",
    "printable",
    "redact",
    "redacted",
    "secret_arguments",
    "set_secrets",
    "without_password",
]

MASK = "****"
_SECRET_WORDS = frozenset(
    "SECRET SECRETS TOKEN TOKENS PASSWORD PASSWORDS PASSWD PASS PWD PW PASSPHRASE CREDENTIAL CREDENTIALS CREDS "
    "AUTH AUTHORIZATION PRIVATE KEY KEYS APIKEY ACCESSKEY SECRETKEY PAT JWT WEBHOOK SIGNATURE SAS COOKIE "
    "SESSIONID DSN CONNECTIONSTRING".split()
)
# Run together with other words (PGPASSWORD, HFTOKEN, DBPASS, SSHKEY): found inside a word, or at its end.
_SECRET_PARTS = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY", "CREDENTIAL", "PRIVATEKEY")
_SECRET_ENDINGS = ("PASS", "PWD", "KEY")
# Names whose words look secret but whose values are not (paths, switches, counts).
_NOT_SECRET = frozenset(
    {
        "TOKENIZERS_PARALLELISM",
        "PWD",  # the shell's working directory, not a password
        "OLDPWD",
        "SSH_AUTH_SOCK",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AWS_SHARED_CREDENTIALS_FILE",
        "PASSWORD_STORE_DIR",
        "KEYRING_BACKEND",
        "PYTHONHASHSEED",
    }
)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_VALUE_PATTERNS = re.compile(
    "|".join(
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)",
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}",
            r"\bhf_[A-Za-z0-9]{20,}",
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
            r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]+",
            r"(?<=AccountKey=)[^;\s\"']+",
            r"(?<=SharedAccessKey=)[^;\s\"']+",
            # a bearer token with a digit in it (a word after "bearer" in a sentence has none)
            r"(?<=(?i:bearer) )(?=[A-Za-z_\-.~+/=]*\d)[A-Za-z0-9_\-.~+/]{12,}=*",
            # basic credentials outside a header: padded base64 (not "basic training", "basic Conv2DTranspose")
            r"(?<=(?i:basic) )[A-Za-z0-9+/]{8,}={1,2}(?![A-Za-z0-9+/=])",
            r"(?<=SharedAccessSignature=)[^;\s\"']+",
            r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+",
        )
    )
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_FLAG = re.compile(r"^--?([A-Za-z][A-Za-z0-9_.\-]*)(?:[=:](.*))?$", re.S)  # --token=X, --token X, --token:X
# A positional NAME=VALUE (`TOKEN=X`, Hydra's `db.password=X`, `+db.password=X`, `++db.password=X`).
_ASSIGNMENT = re.compile(r"^\+{0,2}([A-Za-z_][A-Za-z0-9_.\-]*)=(.+)$", re.S)
# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), other two-byte ESC sequences, then any
# remaining C0/C1 control character except tab.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?|[\x00-\x08\x0a-\x1f\x7f-\x9f]"
    r"|[\u200e\u200f\u202a-\u202e\u2066-\u2069]"  # bidirectional overrides: text that shows other than it is
)
MIN_MASKED = 4  # shorter values would mask ordinary text


def _words(name: str) -> list[str]:
    return [word.upper() for word in _WORDS.findall(name)]


def _normal(name: str) -> str:
    return name.replace("-", "_").upper()


def is_declared(name: str, declared: Iterable[str]) -> bool:
    """Whether `name` is one of the spec's `secrets`, whatever its case and `-` or `_`."""
    return name in declared or _normal(name) in {_normal(d) for d in declared}


def is_secret(name: str, declared: Iterable[str] = ()) -> bool:
    """Whether an environment variable or flag called `name` holds a secret, by its words (`DB_PASS`,
    `apiKey`) or run together (`PGPASSWORD`, `SSHKEY`); `declared` names match whatever their case and
    whether a flag spells them with `-` or `_`."""
    if is_declared(name, declared):
        return True
    return _known_name_secret(name) if len(name) <= _NAME_KEPT else _secret_by_its_words(name)


def _secret_by_its_words(name: str) -> bool:
    if name.upper() in _NOT_SECRET:
        return False
    words = _words(name)
    joined = {a + b for a, b in zip(words, words[1:], strict=False)}  # API_KEY -> APIKEY, CONNECTION_STRING
    if _SECRET_WORDS.intersection(words) or _SECRET_WORDS.intersection(joined):
        return True
    return any(
        any(part in word for part in _SECRET_PARTS) or word.endswith(_SECRET_ENDINGS) and len(word) > 4
        for word in words
    )


_NAME_KEPT = 64  # names up to this long are judged once: the same few come once per task in every summary
_known_name_secret = functools.lru_cache(maxsize=1024)(_secret_by_its_words)


# A flag or override names a secret when its last word is one (`--hf-token`, `db.password`, `--api-key`):
# the head of a compound name says what it holds. Flags are full of settings about secrets that are no
# secrets themselves (`--max-tokens 2048`, `--tokenizer bert`, `sort_key=loss`, `--password-file p`),
# whose values would otherwise be masked in every line the run prints.
_SECRET_HEADS = frozenset(
    "SECRET TOKEN PASSWORD PASSWD PASS PWD PW PASSPHRASE CREDENTIAL CREDENTIALS CREDS APIKEY ACCESSKEY "
    "SECRETKEY PRIVATEKEY JWT PAT COOKIE SESSIONID DSN CONNECTIONSTRING WEBHOOK KEY BEARER".split()
)
# ...unless what comes before says it names something else: a sort or dictionary key, a tokenizer's token.
_NOT_SECRET_KINDS = {
    "KEY": frozenset(
        "SORT PRIMARY FOREIGN UNIQUE CACHE GROUP PARTITION SHARD HASH DICT MAP INDEX ROW COLUMN JOIN LOOKUP "
        "RANDOM RNG PRNG SEED BATCH DATA FEATURE FEATURES LABEL TARGET INPUT OUTPUT METRIC MONITOR CHECKPOINT "
        "NAME QUERY VALUE ATTENTION MODEL CONFIG IMAGE TEXT AUDIO RESULT OBJECT SPLIT BLOB FILE PATH PREFIX "
        "BUCKET".split()
    ),
    "TOKEN": frozenset(
        "PAD EOS BOS UNK SEP CLS MASK SPECIAL START END STOP NEWLINE SPACE EOT BOT DECODER "
        "PAGE NEXT CONTINUATION CURSOR SYNC RESUME RESUMPTION".split()  # and a listing's place: pageToken
    ),
}
_HEAD_ENDINGS = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY")  # run together: HFTOKEN
# Values no secret has: a switch, a number, or a way to authenticate (`--use_auth_token True`,
# `MAX_TOKENS=2048`, `--auth-type basic`).
_NO_SECRET_VALUE = re.compile(
    r"(?i:true|false|yes|no|on|off|none|null|basic|bearer|digest|oauth2?|kerberos|ntlm|anonymous)"
    r"|[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?"
)


def _argument_names_secret(name: str) -> bool:
    return name.upper() not in _NOT_SECRET and _head_names_secret(_words(name))


def _head_names_secret(words: list[str], more_heads: frozenset[str] = frozenset()) -> bool:
    """Whether a name of these words holds a secret, by its last word (see _SECRET_HEADS)."""
    if not words:
        return False
    head = words[-1]
    if head in _NOT_SECRET_KINDS and len(words) > 1 and words[-2] in _NOT_SECRET_KINDS[head]:
        return False
    return head in _SECRET_HEADS or head in more_heads or (len(head) > 5 and head.endswith(_HEAD_ENDINGS))


def could_be_secret(value: str) -> bool:
    """Whether `value` could be a secret's at all: not a switch (true, no, on) nor a number."""
    return not _NO_SECRET_VALUE.fullmatch(value.strip())


def looks_secret(value: str) -> bool:
    """Whether a value is a secret by its form, whatever it is called."""
    return bool(_VALUE_PATTERNS.search(value) or _URL_PASSWORD.search(value)) or bool(_query_secrets(value))


def _secret_parts(value: str) -> list[str]:
    """The secrets in `value` by their form, each alone: `--msg "push with ghp_..."` hides the token,
    not the words around it."""
    found = [match.group() for match in _VALUE_PATTERNS.finditer(value)]
    by_place = [match[2] for match in _AUTHORIZATION.finditer(value)]
    by_place += [match[2] for match in _URL_PASSWORD.finditer(value)]
    return found + [part for part in by_place if _credential_like(part)] + _query_secrets(value)


# A secret in a URL's query string, by its parameter's name as a flag's: `?access_token=X`, `&api_key=X`,
# `&pwd=X`, `&auth=X`, `&sig=X` (an Azure SAS), `&X-Amz-Signature=X` (a presigned URL).
# Also after `;` (matrix parameters, `;password=X`) and `#` (a fragment, `#secret=X`).
_QUERY_PARAMETER = re.compile(r"([?&;#])([A-Za-z][A-Za-z0-9_.\-]{0,63})=([^&;\s#\"'<>]{1,4096})")
_QUERY_HEADS = frozenset({"AUTH", "AUTHKEY", "AUTHORIZATION", "SIG", "SIGNATURE"})
_SIGNED = frozenset({"SIG", "SIGNATURE"})  # a signature's value has digits: `signature=serving_default` has none
# What is masked wherever it shows, once found in a URL or a header: 8 characters or more, neither
# letters alone nor digits alone, and not a path (`data/train-00001.tfrecord`). Shorter or plainer
# values are masked in their URL or header only: "test" as a URL's password must not turn "latest"
# into "la****" in every line, nor `12345678` a step number. Anything else counts, identifiers
# included: `db_pass_2024`, `tiger-piano-harbor-57` and a UUID are passwords as often as not.


def _credential_like(value: str) -> bool:
    return (
        len(value) >= 8
        and not value.isalpha()
        and not value.isdigit()
        and "/" not in value
        and not any(char.isspace() for char in value)
    )


def _query_names_secret(name: str, value: str) -> bool:
    """As a flag's name, without its exceptions for shell variables (`pwd=` is a password here)."""
    words = _words(name)
    if not could_be_secret(value) or not _head_names_secret(words, _QUERY_HEADS):
        return False
    return words[-1] not in _SIGNED or any(char.isdigit() for char in value)


def _query_secrets(text: str) -> list[str]:
    """The secret values in the query strings of the URLs in `text` that look like credentials
    (`_credential_like`): each is masked wherever it shows, also decoded. A shorter or plainer one
    (`?pass=train`) is masked in its URL only: "train" must not be masked in every other line."""
    if "=" not in text:
        return []
    return [
        found[3]
        for found in _QUERY_PARAMETER.finditer(text)
        if _query_names_secret(found[2], found[3]) and _credential_like(found[3])
    ]


def _masked_query(found: re.Match[str]) -> str:
    if _query_names_secret(found[2], found[3]):
        return f"{found[1]}{found[2]}={MASK}"
    return found[0]


# scheme://user:PASSWORD@host, the password up to the last @ of the word (it may hold / or @). A
# scheme starts only where no scheme character precedes it, and every part is bounded: linear in
# any line (a 64 KiB line of letters took seconds with unbounded parts tried at every position).
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]{0,31}://[^/\s:@]{0,255}:)(\S{1,1024})@")


def without_password(address: str) -> str:
    """`user:password@host` as `user:****@host`, as ssh's forms may carry one (a URL's is masked by pattern)."""
    login, at, host = address.rpartition("@")
    if not at or ":" not in login:
        return address
    return f"{login.split(':', 1)[0]}:{MASK}@{host}"


# An Authorization header's credentials, whatever they look like: `Authorization: Basic dXNlcjpwYXNz`.
_AUTHORIZATION = re.compile(
    r"((?i:authorization)[\"']?\s{0,4}[:=]\s{0,4}[\"']?(?i:basic|bearer|token|api-?key)\s{1,4})([^\s\"',;]{4,})"
)


# A header or setting whose value is a credential, as an HTTP library's debug log or a config dump
# prints it: `X-Api-Key: X`, `api_key=X`, `X-Auth-Token: X`, `private_token: X`, `Cookie: a=X; b=Y`,
# `('Set-Cookie', 'X')`, `"x-goog-api-key": "X"`. The name starts a word (after a colour's escape
# too, or `use_`); a quoted value is masked up to its closing quote; a bare one up to a blank, comma,
# semicolon or bracket, except a `Cookie:` header's, whose `a=X; b=Y` runs to the line's end (or to
# the next header inside a request printed as bytes: b'...\r\nCookie: ...'). A value no secret has
# (None, null, true, a number) is left as it is: `Namespace(api_key=None, ...)`.
_SECRET_HEADER = re.compile(
    r"((?i:(?:x[-_])?api[-_]?keys?|x[-_]auth[-_]token|x[-_]amz[-_]security[-_]token|aws[-_]session[-_]token"
    r"|x[-_]vault[-_]token|private[-_]token|ocp[-_]apim[-_]subscription[-_]key|(?:set[-_])?cookies?)"
    r"(?:\x1b\[[0-9;]{0,16}m){0,3}"  # a colour ended between the name and its separator
    r"(?:[\"'][ \t]*,|[\"']?[ \t]*(?:=>|[:=]))[ \t]*)"  # `: `, `=`, `=>`, or `', ` of a printed tuple
    r"(?:([\"'])([^\"'\r\n]+)|([^\s\"',;)\]}](?:(?!\\[rn])[^\r\n])*))"
)
_BARE_VALUE_END = re.compile(r"[\s,;)\]}]")
_COOKIE_HEADER = re.compile(r"(?i:(?:set-)?cookies?)(?:\x1b\[[0-9;]{0,16}m){0,3}[\"']?[ \t]*:")  # `a=X; b=Y` to the end
_SIGNATURE = re.compile(r"((?i:signature)[\"']?[ \t]*[=:][ \t]*[\"']?)[0-9a-fA-F]{64}\b")  # AWS Signature V4
_HEADER_WORDS = ("key", "token", "cookie", "signature")
_WORD_START = re.compile(r"(?:^|[^A-Za-z0-9]|\\[rn]|\x1b\[[0-9;]{0,16}m)$")  # what may come before a name


def _masked_header(found: re.Match[str]) -> str:
    if not _WORD_START.search(found.string[max(0, found.start() - 20) : found.start()]):
        return found[0]  # inside a word (`monkey_cookie`? no: `xapi_key`): not such a name
    name, quote, quoted, bare = found[1], found[2], found[3], found[4]
    if quote:
        return found[0] if _NO_SECRET_VALUE.fullmatch(quoted) else f"{name}{quote}{MASK}"
    before = found.string[found.start() - 1 : found.start()]
    stop = None if _COOKIE_HEADER.match(name) and before not in ("_", "-") else _BARE_VALUE_END.search(bare)
    end = stop.start() if stop is not None else len(bare)
    value = bare[:end]
    if not value or _NO_SECRET_VALUE.fullmatch(value):
        return found[0]
    return f"{name}{MASK}{bare[end:]}"


def _patterns(text: str) -> str:
    text = _AUTHORIZATION.sub(rf"\g<1>{MASK}", _VALUE_PATTERNS.sub(MASK, text))
    lowered = text.lower()
    if any(word in lowered for word in _HEADER_WORDS):  # what every such name holds: cheap to look for
        text = _SIGNATURE.sub(rf"\g<1>{MASK}", _SECRET_HEADER.sub(_masked_header, text))
    if "=" in text:
        text = _QUERY_PARAMETER.sub(_masked_query, text)
    return _URL_PASSWORD.sub(rf"\g<1>{MASK}@", text) if "://" in text else text


def mask_value(name: str, value: str, declared: Iterable[str] = ()) -> str:
    """The whole value for a secret name; otherwise the secret-looking parts of it."""
    if is_secret(name, declared):
        return MASK
    return _patterns(value)


def mask_env(env: Mapping[str, str], declared: Iterable[str] = ()) -> dict[str, str]:
    return {key: mask_value(key, value, declared) for key, value in env.items()}


def secret_arguments(argv: Sequence[str], declared: Iterable[str] = (), _depth: int = 0) -> list[str]:
    """The values in a command line that are secrets: `--token=X`, `--api-key X`, `--token:X`, a word
    `TOKEN=X` or `db.password=X` (an override, as Hydra takes them), or secret-looking."""
    found: list[str] = []
    for index, arg in enumerate(argv):
        match = _FLAG.match(arg)
        assignment = None if match else _ASSIGNMENT.match(arg)
        if match and _names_secret_argument(match[1], declared):
            value = match[2] if match[2] is not None else (argv[index + 1] if index + 1 < len(argv) else "")
            if _taken_value(value) and (is_declared(match[1], declared) or could_be_secret(value)):
                found.append(value)
        elif assignment and _names_secret_argument(assignment[1], declared):
            if is_declared(assignment[1], declared) or could_be_secret(assignment[2]):
                found.append(assignment[2])
        else:
            found.extend(_secret_parts(arg))  # https://h/api?access_token=X: the value, not the whole URL
        value = match[2] if match and match[2] else assignment[2] if assignment else arg
        if value.lstrip().startswith("{"):  # --config '{"password": ...}', --cfg={...}, cfg={...}
            found.extend(_secrets_in_json(value, declared))
        if match and match[2] and not _names_secret_argument(match[1], declared) and _ASSIGNMENT.match(match[2]):
            found.extend(secret_arguments([match[2]], declared))  # --env=HF_TOKEN=X, --set=db.password=X
        if _depth == 0 and any(space in arg for space in " \t\n"):  # `bash -c '... --token=X'`, "--opts PASS=X"
            found.extend(secret_arguments(arg.split(), declared, _depth=1))
    return list(dict.fromkeys(found))


def _secrets_in_json(text: str, declared: Iterable[str]) -> list[str]:
    """The string values of secret names in a JSON object given as one argument (nested too)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return []
    found: list[str] = []
    stack = [data]
    while stack and len(found) < 1000:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if isinstance(value, str) and _names_secret_argument(str(key), declared) and could_be_secret(value):
                    found.append(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
    return found


def _names_secret_argument(name: str, declared: Iterable[str]) -> bool:
    return is_declared(name, declared) or _argument_names_secret(name)


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
    """Masks the literal secret values of one spec, and every secret-looking pattern, in any text."""

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
                    literals.extend(_secret_parts(value))  # DATA_URL=https://h/x?access_token=...: printed alone
        for argv in argvs:
            literals.extend(secret_arguments(argv, declared))
        return cls(literals, declared)

    def text(self, text: str) -> str:
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
    """`text` with the current launch's secrets and every secret-looking pattern masked."""
    return _current.text(text)


def redacted(data: Any) -> Any:
    """JSON-like data redacted by the current launch's secrets (see `Redactor.data`)."""
    return _current.data(data)


def printable(line: str) -> str:
    """`line` without terminal control sequences (colours, cursor moves, title changes, bells)."""
    return _CONTROL.sub("", line)


_UNSEEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escaped(text: str) -> str:
    """`text` (a name or path the user gave) with each control character written as its escape
    (`\\n`, `\\x1b`), so that what was typed is shown whole and nothing in it acts on the terminal."""
    return _UNSEEN.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)
