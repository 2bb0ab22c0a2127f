"""Which names hold a secret: an environment variable's (by its words, or declared in the spec's
`secrets`), a flag's, an override's or a JSON key's; and what a masked value reads as. The rule
masks nothing itself: launcher/common/masking.py collects and masks the values these names hold.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

MASK = "****"


MIN_MASKED = 4  # shorter values would mask ordinary text


# Which names hold a secret. An environment variable's, by any of its words (split on `_`, `-`, `.`
# and case changes), two of them joined (API_KEY), or a word that holds one run together (PGPASSWORD,
# HFTOKEN, DBPASS, SSHKEY).
_SECRET_WORDS = frozenset(
    "SECRET SECRETS TOKEN TOKENS PASSWORD PASSWORDS PASSWD PASS PWD PW PASSPHRASE CREDENTIAL CREDENTIALS CREDS "
    "AUTH AUTHORIZATION PRIVATE KEY KEYS APIKEY ACCESSKEY SECRETKEY PAT JWT WEBHOOK SIGNATURE SAS COOKIE "
    "SESSIONID DSN CONNECTIONSTRING".split()
)


_SECRET_PARTS = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY", "CREDENTIAL", "PRIVATEKEY")


_SECRET_ENDINGS = ("PASS", "PWD", "KEY")


# Names of the environment every launch runs in (it is read for secrets: a local host's tasks inherit
# it) whose words say secret and whose values are not: without them the working directory (PWD,
# OLDPWD) and the ssh agent's socket the launcher itself reaches hosts through would be masked in
# every path shown, and Hugging Face's switch in every environment listed.
_NOT_SECRET = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK", "TOKENIZERS_PARALLELISM"})


# A flag's or an override's, by its last word, which says what it holds: `--hf-token`, `db.password`,
# `--api-key` hold a secret, `--max-tokens`, `--tokenizer` and `--password-file` do not.
_SECRET_HEADS = frozenset(
    "SECRET TOKEN PASSWORD PASSWD PASS PWD PW PASSPHRASE CREDENTIAL CREDENTIALS CREDS APIKEY ACCESSKEY "
    "SECRETKEY PRIVATEKEY JWT PAT COOKIE SESSIONID DSN CONNECTIONSTRING WEBHOOK KEY BEARER".split()
)


_HEAD_ENDINGS = ("PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "TOKEN", "APIKEY")  # run together: HFTOKEN


# KEY and TOKEN name a dataset's or a dictionary's key and a tokenizer's token as often as a credential:
# after these words they do. The command line's values are collected and masked in every line the run
# prints: `--label-key label`, `--monitor-key val_loss`, `--eos-token </s>` would mask the logs' words.
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


# A number or a switch is a setting, never a secret: `--use_auth_token True`, `MAX_TOKENS=2048`.
_SETTING = re.compile(
    r"(?i:true|false|yes|no|on|off|none|null|basic|bearer|digest|oauth2?|kerberos|ntlm|anonymous)"  # an auth method
    r"|[-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?"
)


_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words_of(name: str) -> list[str]:
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
    return is_declared(name, declared) or (_known_name_secret if len(name) <= 64 else _secret_by_its_words)(name)


def _secret_by_its_words(name: str) -> bool:
    if name.upper() in _NOT_SECRET:
        return False
    words = words_of(name)
    joined = {a + b for a, b in zip(words, words[1:], strict=False)}  # API_KEY -> APIKEY, CONNECTION_STRING
    if _SECRET_WORDS.intersection(words) or _SECRET_WORDS.intersection(joined):
        return True
    return any(
        any(part in word for part in _SECRET_PARTS) or word.endswith(_SECRET_ENDINGS) and len(word) > 4
        for word in words
    )


# A name up to 64 characters is judged once: the same few come once per task in every summary.
_known_name_secret = functools.lru_cache(maxsize=1024)(_secret_by_its_words)


def names_secret_argument(name: str, declared: Iterable[str]) -> bool:
    """Whether a flag, an override or a JSON key of this name holds a secret: declared, or by its last word."""
    words = words_of(name)
    if is_declared(name, declared):
        return True
    if name.upper() in _NOT_SECRET or not words:
        return False
    head = words[-1]
    if len(words) > 1 and words[-2] in _NOT_SECRET_KINDS.get(head, frozenset()):
        return False
    return head in _SECRET_HEADS or (len(head) > 5 and head.endswith(_HEAD_ENDINGS))


def could_be_secret(value: str) -> bool:
    """Whether `value` could be a secret's at all: not a switch (true, no, on) nor a number."""
    return not _SETTING.fullmatch(value.strip())
