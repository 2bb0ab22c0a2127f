"""The well-known token forms the launcher masks whatever they are called: one row per form, each with
one example it must mask and one it must keep (tests/unit/test_secrets.py walks them). A new form is a
new row; a form that would need a list of exceptions is the wrong form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.common.secret_names import MASK


def credential_like(value: str) -> bool:
    """Whether a value found by its place (a URL's password, a header's credentials) is masked wherever
    else it shows: 8 characters or more, neither letters alone nor digits alone, not a path. A plainer
    one is masked in its place only: a URL's password `test` must not turn `latest` into `la****`."""
    return len(value) >= 8 and not (value.isalpha() or value.isdigit()) and "/" not in value


@dataclass(frozen=True)
class TokenForm:
    """A well-known token form. It masks its `secret` group when it has one (found by its place: the
    rest of the match is kept), else its whole match; `masks` is an example it must mask, `keeps` one
    it must leave as it is."""

    name: str
    pattern: re.Pattern[str]
    masks: str
    keeps: str

    def mask(self, text: str) -> str:
        return self.pattern.sub(self._masked, text)

    @staticmethod
    def _masked(found: re.Match[str]) -> str:
        start, end = found.span("secret") if "secret" in found.re.groupindex else found.span()
        return found.string[found.start() : start] + MASK + found.string[end : found.end()]

    def secrets(self, text: str) -> list[str]:
        """The secrets of this form in `text`, each alone: a whole match, or a `secret` group that
        looks like a credential (see credential_like)."""
        if "secret" not in self.pattern.groupindex:
            return [found.group() for found in self.pattern.finditer(text)]
        return [found["secret"] for found in self.pattern.finditer(text) if credential_like(found["secret"])]


TOKEN_FORMS: tuple[TokenForm, ...] = (
    TokenForm("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"),
              "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2", "ghp_docs"),
    TokenForm("OpenAI or Anthropic key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"),
              "sk-" + "proj-ABCDEFGHIJKLMNOPQRSTUVWX", "sk-learn"),
    TokenForm("Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "hf_" + "abcdefghijklmnopqrstuvwxyz12",
              "hf_transfer"),
    TokenForm("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "AKIA" + "ABCDEFGHIJKLMNOP",
              "ASIA-PACIFIC"),
    TokenForm("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), "xoxb-" + "1234567890-abcdefghij",
              "xoxb-1"),
    TokenForm("Slack webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"),
              "https://hooks.slack.com/services/" + "T000/B000/XXXXXXXXXXXXXXXX", "https://api.slack.com/messaging/webhooks"),
    TokenForm("JWT", re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]+"),
              "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
              "eyJhbGciOiJIUzI1NiJ9"),
    TokenForm("Google API key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
              "AIza" + "SyA-0123456789abcdefghijklmnopqrstu", "AIzaSyD-123456"),
    TokenForm("Azure connection string key",
              re.compile(r"(?:(?<=AccountKey=)|(?<=SharedAccessKey=)|(?<=SharedAccessSignature=))[^;\s\"']+"),
              "AccountName=acct;AccountKey=" + "Zm9vYmFyYmF6cXV4==;", "SharedAccessKeyName=root;"),
    TokenForm("Azure SAS in a URL",
              re.compile(r"\bsv=\d{4}-\d\d-\d\d&[^\s\"'<>#]{0,256}?\bsig=(?P<secret>[^&\s\"'<>#;]+)"),
              "https://acct.blob.core.windows.net/c?sv=2022-11-02&sr=b&sig=" + "AbC%2Bdef123",
              "https://h/model?sig=serving_default"),
    TokenForm("Authorization header", re.compile(r"(?i:authorization)[\"']?\s{0,4}[:=]\s{0,4}[\"']?"
                                                 r"(?i:basic|bearer|token|api-?key)\s{1,4}(?P<secret>[^\s\"',;]{4,})"),
              "Authorization: Basic " + "dXNlcjpwYXNz", "Authorization: required"),
    # outside a header: a bearer token has a digit, unlike the word after "bearer" in a sentence
    TokenForm("Bearer token", re.compile(r"(?<=(?i:bearer) )(?=[A-Za-z_\-.~+/=]*\d)[A-Za-z0-9_\-.~+/]{12,}=*"),
              "Bearer " + "abcdefgh12345678", "Bearer capacity exceeded"),
    # outside a header: basic credentials are padded base64, unlike "basic training" or "basic Conv2DTranspose"
    TokenForm("Basic credentials", re.compile(r"(?<=(?i:basic) )[A-Za-z0-9+/]{8,}={1,2}(?![A-Za-z0-9+/=])"),
              "Basic " + "dXNlcjpwYXNzd29yZA==", "basic Conv2DTranspose"),
    TokenForm("AWS signature", re.compile(r"(?i:signature)[\"']?[ \t]*[=:][ \t]*[\"']?(?P<secret>[0-9a-fA-F]{64})\b"),
              "Signature=" + "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
              "signature=serving_default"),
)  # fmt: skip

# Any of the forms, in one pass: most lines hold none, and then one search is all they cost.
ANY_FORM = re.compile("|".join(f"(?:{form.pattern.pattern.replace('(?P<secret>', '(?:')})" for form in TOKEN_FORMS))
