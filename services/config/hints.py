"""The "did you mean" of a configuration error: for an unknown key, the known key of the
same table that comes closest, found by walking the configuration's models along the
error's location (``queues.jobs.tabel`` -> ``QueueConfig`` -> ``table``)."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel


def _inner(annotation: Any) -> Any:
    """The model, mapping or list an annotation holds (``X | None`` -> ``X``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _inner(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _inner(arg)
    return annotation


def _step(current: Any, part: str | int) -> Any:
    """The annotation one step further along a location, or None when it leads nowhere."""
    current = _inner(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        field = current.model_fields.get(str(part))
        return None if field is None else field.annotation
    origin = typing.get_origin(current)
    if origin is dict:
        return typing.get_args(current)[1]
    if origin is list:
        return typing.get_args(current)[0]
    return None


def did_you_mean(root: type[BaseModel], loc: Sequence[str | int]) -> str | None:
    """For an unknown key at ``loc``, the closest known key of its table, if one is close."""
    if not loc:
        return None
    current: Any = root
    for part in loc[:-1]:
        current = _step(current, part)
        if current is None:
            return None
    table = _inner(current)
    if not (isinstance(table, type) and issubclass(table, BaseModel)):
        return None
    close = difflib.get_close_matches(str(loc[-1]), list(table.model_fields), n=1, cutoff=0.6)
    return close[0] if close else None
