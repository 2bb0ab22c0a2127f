"""What `launch export k8s` takes from its command line for Kubernetes: object names, namespaces,
label pairs, tolerations and resource quantities, parsed and checked.

Pure: each check either returns or raises UsageError naming the flag, what it got and how to write
it. Nothing here reads a cluster or decides what goes into a manifest; it only says whether a value
is one Kubernetes would accept, so that a bad flag is refused here and not by the API server after
`kubectl apply` has created half of the objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from launcher.common.errors import UsageError

__all__ = [
    "EFFECTS",
    "Toleration",
    "check_label",
    "check_namespace",
    "check_object_name",
    "check_quantity",
    "check_shown",
    "parse_pairs",
    "parse_toleration",
]

# The Kubernetes validation rules (k8s.io/apimachinery/pkg/util/validation): a DNS-1123 label and
# subdomain, a qualified name (a label key: [prefix/]name) and a label value.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# A resource quantity as k8s.io/apimachinery/pkg/api/resource parses it: a signed decimal number
# (`1`, `1.5`, `1.`, `.5`) and a binary suffix (Ki..Ei), a decimal one (n, u, m, k, M..E) or an
# exponent (`1e3`, `2E-1`).
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_SCALE = {
    **{f"{p}i": Decimal(1024) ** (i + 1) for i, p in enumerate("KMGTPE")},
    **{p: Decimal(10) ** e for p, e in zip("numkMGTPE", (-9, -6, -3, 3, 6, 9, 12, 15, 18), strict=True)},
}
_LARGEST = Decimal(2) ** 63  # Kubernetes keeps a quantity in an int64 where it can
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def check_shown(flag: str, value: str) -> None:
    """Refuse a value with characters that cannot be shown or written on one line (controls, line
    separators): every value given here ends up in a manifest."""
    if not value.isprintable():
        raise UsageError(f"Got {flag} {value!r}: it holds a control character or line separator; remove it.")


def check_object_name(flag: str, value: str) -> None:
    """A Kubernetes object name (DNS-1123 subdomain): claims, Secrets, storage classes."""
    check_shown(flag, value)
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise UsageError(
            f"Got {flag} {value!r}: a Kubernetes object name is at most 253 lowercase letters, digits, '-' and "
            f"'.', starting and ending with a letter or digit."
        )


def check_namespace(value: str) -> None:
    check_shown("--namespace", value)
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise UsageError(
            f"Got --namespace {value!r}: a namespace is at most 63 lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit."
        )


def _key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"its prefix {prefix!r} must be a DNS subdomain (lowercase, digits, '-' and '.', such as example.com)"
    if not (len(name) <= 63 and _NAME_PART.fullmatch(name)):
        return (
            f"its name {name!r} must be 1-63 letters, digits, '-', '_' and '.', starting and ending with a letter or "
            f"digit"
        )
    return None


def check_label(flag: str, key: str, value: str) -> None:
    """A label key and value, as labels and node selectors take them."""
    check_shown(flag, f"{key}={value}")
    problem = _key_problem(key)
    if problem is None and value and not (len(value) <= 63 and _NAME_PART.fullmatch(value)):
        problem = (
            f"its value {value!r} must be empty or 1-63 letters, digits, '-', '_' and '.', starting and ending with a "
            f"letter or digit"
        )
    if problem is not None:
        raise UsageError(f"Got {flag} {key}={value}: {problem}; write KEY=VALUE, such as team=vision.")


def parse_pairs(flag: str, texts: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE texts (a repeated flag) as pairs, each checked; a key given twice is refused."""
    pairs: dict[str, str] = {}
    for text in texts:
        key, equals, value = text.partition("=")
        if not equals:
            raise UsageError(f"Got {flag} {text!r}: write KEY=VALUE, such as {flag} team=vision.")
        check_label(flag, key, value)
        if key in pairs and pairs[key] != value:
            raise UsageError(f"Got {flag} {key}={pairs[key]} and {flag} {key}={value}: give each key once.")
        pairs[key] = value
    return tuple(pairs.items())


@dataclass(frozen=True)
class Toleration:
    """One pod toleration: a taint with `key` (and `value`, when given) is tolerated, for `effect`
    or, when empty, for every effect."""

    key: str
    value: str | None = None
    effect: str = ""

    def check(self) -> None:
        shown = self.text()
        check_shown("--toleration", shown)
        problem = _key_problem(self.key)
        if problem is None and self.value and not (len(self.value) <= 63 and _NAME_PART.fullmatch(self.value)):
            problem = f"its value {self.value!r} must be 1-63 letters, digits, '-', '_' and '.'"
        if problem is None and self.effect and self.effect not in EFFECTS:
            problem = f"its effect {self.effect!r} must be one of {', '.join(EFFECTS)}"
        if problem is not None:
            raise UsageError(
                f"Got --toleration {shown}: {problem}; write KEY[=VALUE][:EFFECT], such as nvidia.com/gpu:NoSchedule."
            )

    def text(self) -> str:
        value = f"={self.value}" if self.value is not None else ""
        effect = f":{self.effect}" if self.effect else ""
        return f"{self.key}{value}{effect}"

    def manifest(self) -> dict[str, Any]:
        """As a pod's spec.tolerations holds it: Equal with a value, Exists without."""
        result: dict[str, Any] = {"key": self.key}
        if self.value is None:
            result["operator"] = "Exists"
        else:
            result["operator"] = "Equal"
            result["value"] = self.value
        if self.effect:
            result["effect"] = self.effect
        return result


def parse_toleration(text: str) -> Toleration:
    """KEY[=VALUE][:EFFECT] (the form of `kubectl taint`), checked."""
    rest, colon, effect = text.rpartition(":")
    if not colon:
        rest, effect = text, ""
    key, equals, value = rest.partition("=")
    toleration = Toleration(key, value if equals else None, effect)
    toleration.check()
    return toleration


def _quantity(value: str) -> Decimal | None:
    """The amount `value` stands for, as Kubernetes reads it; None when it is not a quantity."""
    found = _QUANTITY.fullmatch(value)
    if found is None:
        return None
    suffix = found["suffix"] or ""
    try:
        if suffix[:1] in ("e", "E"):
            exponent = int(suffix[1:])
            return Decimal(found["number"]).scaleb(exponent) if abs(exponent) <= 30 else None
        return Decimal(found["number"]) * _SCALE.get(suffix, Decimal(1))
    except InvalidOperation:
        return None


def check_quantity(flag: str, value: str, kind: str) -> None:
    """A resource quantity above zero, in Kubernetes' grammar: `cpu` (8, 1.5, 500m, 1e3) in steps of
    1m at the finest, or bytes (`memory`, `storage`: 32Gi, 100G, 1e9) in whole bytes."""
    check_shown(flag, value)
    amount = _quantity(value)
    if kind == "cpu":
        example, step, unit = "8, 1.5 or 500m (thousandths of a CPU)", Decimal("0.001"), "1m (a thousandth of a CPU)"
    else:
        example, step, unit = "32Gi, 512Mi or 100G", Decimal(1), "a whole byte"
    hint = ""
    if kind != "cpu" and re.fullmatch(r"[0-9.]+m", value):
        hint = f" ({value} would be thousandths of a byte; {value[:-1]}Mi is mebibytes)"
    if amount is None or amount <= 0 or amount >= _LARGEST:
        raise UsageError(f"Got {flag} {value!r}{hint}: give a quantity above zero such as {example}.")
    if amount % step != 0:
        raise UsageError(f"Got {flag} {value!r}{hint}: Kubernetes counts it in steps of {unit}; give e.g. {example}.")
