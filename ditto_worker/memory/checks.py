"""Input rules and output checks of the six MEMORY nodes, used by :mod:`ditto_worker.memory.core`.

Pure functions over contract models, no I/O. Every violation raises
:class:`~ditto_worker.errors.MemoryError`: ``INVALID_INPUT`` before the plugin
(MEM-ERR-1), ``INVALID_BACKEND_OUTPUT`` after it (MEM-ERR-2). Messages name the field at
fault (pydantic's ``loc`` and ``msg``) and never echo a value from the input or output.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ditto_worker.contracts import (
    LONE_SURROGATE,
    MemoryDeleteInput,
    MemoryDeleteOutput,
    MemoryGetInput,
    MemoryItem,
    MemoryQueryOutput,
    MemorySearchResult,
    MemoryUpdateInput,
    MemoryWriteInput,
)
from ditto_worker.errors import ErrorCode, MemoryError

ModelT = TypeVar("ModelT", bound=BaseModel)
HashT = TypeVar("HashT", bound=Hashable)

_MAX_REPORTED = 3
_MAX_LOC_PART = 40


@dataclass(frozen=True)
class Done:
    """An outcome decided without the plugin (an empty batch): ``output`` is final."""

    output: object


# --- messages ---------------------------------------------------------------------------


def _loc(prefix: str, loc: Iterable[int | str]) -> str:
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            part = part[:_MAX_LOC_PART]
            text = f"{text}.{part}" if text else part
    return text or "input"


def describe(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """Summarize a ValidationError as ``field: reason; …`` without any input value."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    parts: list[str] = []
    for err in errors[:_MAX_REPORTED]:
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "string_unicode":  # pydantic's word for a lone surrogate
            msg = LONE_SURROGATE
        loc = err["loc"]
        if model is MemoryUpdateInput and err["type"] == "extra_forbidden" and loc[-1:] == ("key",):
            msg = "an UPDATE entry cannot carry key; id and key never change (MEM-UPDATE-2/3)"
        parts.append(f"{_loc(prefix, loc)}: {msg}")
    if len(errors) > _MAX_REPORTED:
        parts.append(f"and {len(errors) - _MAX_REPORTED} more")
    return "; ".join(parts)


def invalid_input(message: str) -> MemoryError:
    """An ``INVALID_INPUT`` error (MEM-ERR-1)."""
    return MemoryError(ErrorCode.INVALID_INPUT, f"Invalid input: {message}")


def bad_output(message: str) -> MemoryError:
    """An ``INVALID_BACKEND_OUTPUT`` error (MEM-ERR-2)."""
    return MemoryError(
        ErrorCode.INVALID_BACKEND_OUTPUT, f"The memory plugin returned an invalid output: {message}"
    )


# --- parsing ----------------------------------------------------------------------------


def parse_input(model: type[ModelT], raw: Any, prefix: str = "") -> ModelT:
    """Validate ``raw`` (a dict with wire or snake_case names, or the model) strictly.

    Raises:
        MemoryError: ``INVALID_INPUT`` naming the fields at fault (MEM-ERR-1, MEM-PY-4).
    """
    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise invalid_input(describe(exc, prefix, model)) from None


def _output_model(model: type[ModelT], raw: object, where: str) -> ModelT:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise bad_output(describe(exc, where)) from None


def _output_list(model: type[ModelT], raw: object) -> list[ModelT]:
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes | bytearray):
        raise bad_output("output: expected a list")
    # an instance of the model is taken as it is (pydantic does not validate it again:
    # revalidate_instances "never"), without the call
    return [
        value if type(value) is model else _output_model(model, value, f"output[{i}]")
        for i, value in enumerate(raw)
    ]


output_list = _output_list
"""``output_list(model, raw)``: a plugin's raw list output as models (``INVALID_BACKEND_OUTPUT``
naming the first bad element)."""


def dedupe(values: Iterable[HashT]) -> list[HashT]:
    """``values`` without repeats, first occurrence kept (MEM-GET-2, MEM-DELETE-1)."""
    return list(dict.fromkeys(values))


def _distinct_ids(ids: Iterable[str], where: str = "output") -> None:
    seen: set[str] = set()
    for i, item_id in enumerate(ids):
        if item_id in seen:
            raise bad_output(f"{where}[{i}]: duplicate id")
        seen.add(item_id)


# --- GET (MEM-GET) ----------------------------------------------------------------------


def prepare_get(data: MemoryGetInput) -> MemoryGetInput | Done:
    """Require ids or keys (MEM-GET-1), dedupe them (MEM-GET-2); both empty -> ``[]``."""
    if data.ids is None and data.keys is None:
        raise invalid_input("ids/keys: give ids, keys or both (MEM-GET-1)")
    ids, keys = dedupe(data.ids or []), dedupe(data.keys or [])
    if not ids and not keys:
        return Done([])
    if len(ids) == len(data.ids or ()) and len(keys) == len(data.keys or ()):
        return data  # nothing repeated: already the request to make
    given: dict[str, Any] = {}
    if data.ids is not None:
        given["ids"] = ids
    if data.keys is not None:
        given["keys"] = keys
    return MemoryGetInput(**given)


def _index_get(items: list[MemoryItem]) -> tuple[dict[str, MemoryItem], dict[str, MemoryItem]]:
    by_id: dict[str, MemoryItem] = {}
    for i, item in enumerate(items):
        previous = by_id.setdefault(item.id, item)
        if previous is not item and previous.model_dump() != item.model_dump():
            raise bad_output(f"output[{i}]: two different records share one id")
    by_key: dict[str, MemoryItem] = {}
    for item in by_id.values():
        if item.key is not None and by_key.setdefault(item.key, item).id != item.id:
            raise bad_output("two different ids returned the same key (MEM-GET-5)")
    return by_id, by_key


def finish_get(data: MemoryGetInput, raw: object) -> list[MemoryItem]:
    """Order: requested ids, then keys; each record once; unrequested -> error (MEM-GET-2/3/5)."""
    by_id, by_key = _index_get(_output_list(MemoryItem, raw))
    ids, keys = data.ids or [], data.keys or []
    wanted_ids, wanted_keys = set(ids), set(keys)
    for item in by_id.values():
        if item.id not in wanted_ids and (item.key is None or item.key not in wanted_keys):
            raise bad_output("a record that was not requested was returned (MEM-GET-2)")
    found = [by_id[i] for i in ids if i in by_id] + [by_key[k] for k in keys if k in by_key]
    return dedupe_items(found)


def dedupe_items(items: Iterable[MemoryItem]) -> list[MemoryItem]:
    """Items with distinct ids, first occurrence kept."""
    seen: set[str] = set()
    out: list[MemoryItem] = []
    for item in items:
        if item.id not in seen:
            seen.add(item.id)
            out.append(item)
    return out


# --- QUERY / SEARCH ---------------------------------------------------------------------


def finish_query(limit: int, raw: object) -> MemoryQueryOutput:
    """Shape, cursor type, ``len(items) <= limit``, distinct ids (MEM-QUERY-2, MEM-ERR-2)."""
    output = _output_model(MemoryQueryOutput, raw, "output")
    if len(output.items) > limit:
        raise bad_output("output.items: more items than the limit (MEM-QUERY-2)")
    _distinct_ids((item.id for item in output.items), "output.items")
    return output


def check_search_options(options: Mapping[str, Any] | None, read: frozenset[str] | None) -> None:
    """Refuse SEARCH ``options`` keys the provider does not read (issue 13).

    Args:
        options: the request's ``options`` object.
        read: the keys the provider declares (``StoreCapabilities.search_options``);
            ``None``: it declares nothing, so nothing is checked here.

    Raises:
        MemoryError: ``INVALID_INPUT`` naming ``options.<key>`` and the keys it reads.
    """
    if not options or read is None:
        return
    for name in options:
        if name not in read:
            known = ", ".join(sorted(read)) or "none"
            raise invalid_input(
                f"options.{name[:_MAX_LOC_PART]}: this store's search does not read that "
                f"option (it reads: {known}); options are never silently ignored"
            )


def finish_search(limit: int, raw: object) -> list[MemorySearchResult]:
    """Shape, finite scores, at most ``limit``, distinct ids; order kept (MEM-SEARCH-3)."""
    results = _output_list(MemorySearchResult, raw)
    if len(results) > limit:
        raise bad_output("output: more results than the limit (MEM-ERR-2)")
    _distinct_ids(result.memory.id for result in results)
    return results


# --- WRITE / UPDATE / DELETE ------------------------------------------------------------


def finish_write(data: MemoryWriteInput, raw: object) -> list[MemoryItem]:
    """One item per draft, in order, key preserved, distinct ids (MEM-WRITE-2)."""
    items = _output_list(MemoryItem, raw)
    if len(items) != len(data.memories):
        raise bad_output("output: expected exactly one record per draft (MEM-WRITE-2)")
    for i, (item, draft) in enumerate(zip(items, data.memories, strict=True)):
        if item.key != draft.key:
            raise bad_output(f"output[{i}].key: differs from the draft's key (MEM-WRITE-2)")
    _distinct_ids(item.id for item in items)
    return items


def prepare_update(data: MemoryUpdateInput) -> MemoryUpdateInput:
    """Distinct ids and at least one field per entry, before the plugin (MEM-UPDATE-3)."""
    seen: set[str] = set()
    for i, entry in enumerate(data.memories):
        if entry.id in seen:
            raise invalid_input(f"memories[{i}].id: duplicate id (MEM-UPDATE-3)")
        seen.add(entry.id)
        if not (entry.has_content or entry.has_metadata):
            raise invalid_input(
                f"memories[{i}]: nothing to update; give content and/or metadata (MEM-UPDATE-3)"
            )
    return data


def finish_update(data: MemoryUpdateInput, raw: object) -> list[MemoryItem]:
    """Every requested id exactly once, returned in request order (MEM-UPDATE-4)."""
    items = _output_list(MemoryItem, raw)
    _distinct_ids(item.id for item in items)
    by_id = {item.id: item for item in items}
    requested = [entry.id for entry in data.memories]
    if set(by_id) != set(requested):
        raise bad_output("output: the updated ids differ from the requested ids (MEM-UPDATE-4)")
    return [by_id[item_id] for item_id in requested]


def finish_delete(data: MemoryDeleteInput, raw: object) -> MemoryDeleteOutput:
    """Deleted ids distinct and requested (MEM-DELETE-2); returned in request order."""
    output = _output_model(MemoryDeleteOutput, raw, "output")
    _distinct_ids(output.deleted, "output.deleted")
    deleted = set(output.deleted)
    if not deleted <= set(data.ids):
        raise bad_output("output.deleted: contains an id that was not requested (MEM-DELETE-2)")
    return MemoryDeleteOutput(deleted=[item_id for item_id in data.ids if item_id in deleted])
