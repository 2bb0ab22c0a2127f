"""pydantic's validation errors as sentences a user can act on: each problem's JSON path, what
the field takes (its help), a close key or kind for a slip, and what to write for a wrong JSON type.
Secret values never reach a message."""

from __future__ import annotations

import json
import re
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from launcher.common.errors import SpecProblem
from launcher.common.masking import looks_secret, secret_arguments
from launcher.common.secret_names import MASK, is_secret
from launcher.spec.hosts import CrossFieldProblems
from launcher.spec.models import ClusterSpec
from launcher.spec.strict_json import json_child
from worker.training_spec import TRAINING_KINDS


def _json_path(loc: tuple[int | str, ...]) -> str:
    path = "$"
    for part in loc:
        if part in ("builtin", "fit", "function", "command") and path.endswith("training"):
            continue  # pydantic inserts the union tag; users never write it
        path = json_child(path, part)
    return path


_TRAINING_KINDS = TRAINING_KINDS


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _walk(loc: tuple[int | str, ...]) -> tuple[list[Any], type[BaseModel] | None]:
    """The field each part of `loc` names, model by model (a list index passes through, a training kind
    picks its model), up to a part that names none (then None, last); and the model reached."""
    model: type[BaseModel] | None = ClusterSpec
    fields: list[Any] = []
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        if part in _TRAINING_KINDS:
            model = _TRAINING_KINDS[part]
            continue
        field = model.model_fields.get(part)
        fields.append(field)
        model = _model_in(field.annotation) if field is not None else None
    return fields, model


def _field_help(loc: tuple[int | str, ...]) -> str | None:
    """The description of the field at `loc`, used as the fix hint."""
    fields, _ = _walk(loc)
    return None if not fields or fields[-1] is None else fields[-1].description


def _keys_beside(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model at the parent of `loc` accepts (its fields and their aliases)."""
    _, model = _walk(loc[:-1])
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


# Names other tools give these settings, too far from ours for a spelling match to find them
_KNOWN_AS = {
    "batch_size": "batch_per_replica",
    "batchsize": "batch_per_replica",
    "per_replica_batch_size": "batch_per_replica",
    "lr": "learning_rate",
    "num_workers": "workers",
    "num_steps": "steps",
    "max_steps": "steps",
}


def _close_key(loc: tuple[int | str, ...]) -> str | None:
    """The accepted key an unknown key at `loc` was most likely meant to be."""
    import difflib

    if not loc or not isinstance(loc[-1], str):
        return None
    beside = _keys_beside(loc)
    known = _KNOWN_AS.get(loc[-1].lower().replace("-", "_"))
    if known in beside:
        return known
    close = difflib.get_close_matches(loc[-1], beside, n=1, cutoff=0.6)
    return close[0] if close else None


def problems_of(error: ValidationError, under: tuple[str, ...] = ()) -> list[SpecProblem]:
    """Every problem of `error`, with its JSON path (`under`: where the validated object lies in the spec)."""
    problems: list[SpecProblem] = []
    for item in error.errors():
        loc = under + tuple(item["loc"])
        if item["type"] == "union_tag_invalid":
            loc += ("kind",)  # the problem is the kind, not the section it selects
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, CrossFieldProblems):
            for sub_path, message in cause.problems:
                problems.append(SpecProblem(_json_path(loc + _loc_of(sub_path)), message))
            continue
        message = _message(item)
        if item["type"] == "extra_forbidden" and (close := _close_key(loc)):
            message = f"unknown key; did you mean {json.dumps(close)}?"
        hint = _field_help(loc) if item["type"] not in ("extra_forbidden", "union_tag_invalid") else None
        problems.append(SpecProblem(_json_path(loc), f"{message}. {hint}" if hint else message))
    return problems


def _message(item: Any) -> str:
    kind = item["type"]
    value = item.get("input")
    name = item["loc"][-1] if item.get("loc") and isinstance(item["loc"][-1], str) else ""
    named = is_secret(name) and tuple(item["loc"]) != ("secrets",)  # the list of secrets' names holds none
    if (named and not isinstance(value, (dict, list))) or (isinstance(value, str) and looks_secret(value)):
        value = _MASKED  # an error message must not carry a secret (of any type) to the screen or a CI log
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling (`launch schema` lists every key)"
    if kind == "missing":
        return "is required"
    if kind == "union_tag_invalid":
        given = _given_kind(item)
        if isinstance(given, str) and secret_arguments(given.split()):
            return f"got {shown(MASK)}; use 'builtin', 'fit', 'function' or 'command'"
        if not isinstance(given, str):
            return f"got {shown(given)}; the kind is a string: 'builtin', 'fit', 'function' or 'command'"
        close = _close_kind(given)
        guess = f"did you mean {json.dumps(close)}? " if close else ""
        return f"got {shown(given)}; {guess}use 'builtin', 'fit', 'function' or 'command'"
    if kind == "union_tag_not_found":
        return "training.kind is required: 'builtin', 'fit', 'function' or 'command'"
    if kind == "string_pattern_mismatch" and isinstance(value, str):
        if name == "user" and ":" in value:  # `bob:password`, as a URL would carry it
            return f"got {shown(value.partition(':')[0] + ':' + MASK)}: give the user name alone (logins use keys)"
        return f"got {shown(value)}, which has characters or a form not allowed here"
    if kind == "value_error":
        return str((item.get("ctx") or {}).get("error", item["msg"]))
    if kind in _WANTED:
        wanted = _WANTED["int_from_float"] if kind == "int_type" and isinstance(value, float) else _WANTED[kind]
        return f"got {shown(value)}; {wanted}"
    said = str(item["msg"])
    return f"got {shown(value)}: {said[:1].lower()}{said[1:]}"  # in the sentence, as every message here reads


_WHOLE = "give a whole number, without quotes (e.g. 2)"


_NUMBER = "give a number, without quotes (e.g. 5 or 0.5)"


_BOOLEAN = "give true or false, without quotes"


_OBJECT = "give an object: {...}"


# What to write instead, for the JSON types a field can be given wrongly (pydantic's error types)
_WANTED = {
    "int_type": _WHOLE,
    "int_parsing": _WHOLE,
    "int_from_float": "give a whole number (e.g. 2)",
    "float_type": _NUMBER,
    "float_parsing": _NUMBER,
    "bool_type": _BOOLEAN,
    "bool_parsing": _BOOLEAN,
    "string_type": "give a string, in double quotes",
    "list_type": "give a list: [...]",
    "dict_type": _OBJECT,
    "model_type": _OBJECT,
    "model_attributes_type": _OBJECT,
}


class _Masked:
    """A secret's value in a message: shown as masked, of no type (it may not be the string a mask reads as)."""


_MASKED = _Masked()


def shown(value: Any) -> str:
    """What the user wrote, briefly: a JSON literal, or the kind of a container."""
    if value is _MASKED:
        return f"a secret's value ({MASK})"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = json.dumps(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return type(value).__name__


def problems_beside_a_misspelt_kind(data: dict[str, Any], error: ValidationError) -> list[SpecProblem]:
    """A misspelt `training.kind` hides every other problem of the section (the kind decides which
    fields it has): when the kind is close to one, the section is checked again as that kind, so that
    the user sees every problem at once."""
    training = data.get("training")
    misspelt = any(
        item["type"] == "union_tag_invalid" and tuple(item["loc"]) == ("training",) for item in error.errors()
    )
    if not misspelt or not isinstance(training, dict) or not isinstance(training.get("kind"), str):
        return []
    close = _close_kind(training["kind"])
    if close is None:
        return []
    try:
        TRAINING_KINDS[close].model_validate({**training, "kind": close})
    except ValidationError as beside:
        return [
            SpecProblem(problem.path, f"{problem.message} (checked as kind {json.dumps(close)})")
            for problem in problems_of(beside, ("training",))
        ]
    return []


def _given_kind(item: Any) -> object:
    """The `kind` the user wrote, as JSON gave it (pydantic's own copy of it is a string)."""
    section = item.get("input")
    return section.get("kind") if isinstance(section, dict) else (item.get("ctx") or {}).get("tag")


def _close_kind(given: str) -> str | None:
    """The training kind a misspelt one is close to, if any."""
    import difflib

    close = difflib.get_close_matches(given, list(TRAINING_KINDS), n=1, cutoff=0.6)
    return close[0] if close else None


def _loc_of(path: str) -> tuple[int | str, ...]:
    """`hosts[0].workers` (a JSON path without its `$`) as pydantic's loc: ("hosts", 0, "workers")."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.\[\]]+", path) if part)


def with_help(problem: SpecProblem) -> SpecProblem:
    """A problem found before validation (NaN, a huge integer), with what its field takes, as validation's say."""
    if not problem.message.startswith("got "):
        return problem
    hint = _field_help(_loc_of(problem.path[1:]))
    return SpecProblem(problem.path, f"{problem.message}. {hint}") if hint else problem
