"""Export and import of memories as JSON Lines (``ditto-worker export`` / ``import``):
the format, the export, the reading and checking of lines; the import's writes are
:mod:`ditto_worker.cli.transfer_import`.

The file (format :data:`FORMAT`, UTF-8, one JSON object per line):

* line 1, the header: ``{"format": "ditto-memory-export", "version": 1, "store": NAME}``;
* every other line one memory, in the source's creation order per scope:
  ``{"scope": {"tenant", "user", "space"} | null, "id", "key"?, "content",
  "metadata"?, "operationId"?}``. ``id`` is the source store's id (used to tell lines
  apart, never written: the target assigns its own ids, MEM-WRITE-1).

Export reads through the public QUERY path, one page (``page_size`` records) at a time
with the store's cursor, so a store is never held in memory. Import writes through the
public WRITE path (the SDK over the target plugin: validation, the plugin's own embedding
under the target's identity, MEM-RET-4; vectors are never in the file). It checks every
line before writing anything (:class:`TransferError` names the line and the field), then:

* records that carry an ``operationId`` are written under it, all records of one
  operation id in one scope in one WRITE (where the last of them is in the file), so the
  target keeps the id with them and its ledger (MEM-RUN-7);
* runs of other records (one scope, at most ``batch_size``) are written under an operation
  id made from their content (``ditto-import:<sha256>``), which they carry afterwards.

So a re-run of the same file (same ``batch_size``) replays every WRITE: the store applies
nothing twice. A target that keeps no operation ids (``capabilities.operation_ids``
false: none of the five stores today, a third-party plugin may) cannot do that: records
whose key the target already holds with the same content and metadata are skipped, others
are written, their operation ids are dropped, and the summary counts what a re-run would
write again (keyless records).

Not carried, because the contract has no way to set them: ids (new ones),
``createdAt``/``updatedAt`` (exported as the source store returned them, MEM-DATA-5; on
import they are the import's time; creation order is kept, except that the records of
one operation id are written together), vectors (re-embedded), keyword statistics
(rebuilt by the target). Log lines and errors never carry content.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import unquote

from pydantic import ValidationError

from ditto_worker.contracts import MemoryItem, to_wire
from ditto_worker.errors import DittoError, MemoryError
from ditto_worker.operation import check_operation_id
from ditto_worker.scope import DEFAULT_SPACE, UNSCOPED, Scope, parse_scope

__all__ = [
    "FORMAT",
    "ExportSummary",
    "Record",
    "TransferError",
    "bad_line",
    "export_memories",
    "list_scopes",
    "parse_record",
    "read_records",
    "scope_label",
    "scope_of_namespace",
]

FORMAT: Final = "ditto-memory-export"
"""The header's ``format``; its ``version`` is :data:`VERSION`."""
VERSION: Final = 1
_FIELDS: Final = frozenset(
    {"scope", "id", "key", "content", "metadata", "operationId", "createdAt", "updatedAt"}
)


class TransferError(DittoError):
    """An export or import that cannot go on: a bad line (its number and field), or a
    store's refusal (its error code and safe message, the lines of the batch). Never
    carries memory content."""


@dataclass(frozen=True)
class Record:
    """One memory line, checked.

    Attributes:
        line: its 1-based line number in the file.
        scope: the scope on the line (``None``: unscoped).
        source_id: the source store's id.
        draft: the WRITE draft (wire names): ``key``?, ``content``, ``metadata``?.
        operation_id: the record's operation id, or ``None``.
    """

    line: int
    scope: Scope | None
    source_id: str
    draft: dict[str, Any]
    operation_id: str | None


@dataclass
class ExportSummary:
    """What an export wrote: memories per scope label (``unscoped`` or ``tenant/user/space``)."""

    counts: dict[str, int] = field(default_factory=dict)


def scope_of_namespace(namespace: str) -> Scope | None:
    """The scope whose :attr:`~ditto_worker.scope.Scope.namespace` is ``namespace``
    (``""``: ``None``, the unscoped one): the percent-encoded parts split at ``:``.

    Raises:
        TransferError: a namespace no scope makes.
    """
    if namespace == UNSCOPED:
        return None
    parts = [unquote(part) for part in namespace.split(":")]
    try:
        if len(parts) == 3 and parts[2] == DEFAULT_SPACE:
            scope = Scope(parts[0], parts[1])
        elif len(parts) == 4 and parts[2] == "task":
            scope = Scope.for_task(parts[0], parts[1], parts[3])
        else:
            scope = None
    except MemoryError:
        scope = None
    if scope is None or scope.namespace != namespace:
        raise TransferError("the store lists a namespace that no scope makes")
    return scope


def list_scopes(store: Any) -> list[Scope | None]:
    """Every scope holding memories in ``store``, by its ``namespaces()`` (SQLite,
    PostgreSQL, MySQL, Qdrant, the in-memory store): the unscoped one first.

    Raises:
        TransferError: the store cannot list its namespaces.
    """
    listing = getattr(store, "namespaces", None)
    if not callable(listing):
        raise TransferError(
            "this store cannot list its scopes; name each with --scope (and --unscoped)"
        )
    return [scope_of_namespace(ns) for ns in listing()]


def scope_label(scope: Scope | None) -> str:
    """``unscoped`` or ``tenant/user/space`` (for summaries; ids, never content)."""
    return "unscoped" if scope is None else f"{scope.tenant}/{scope.user}/{scope.space}"


# --- export -------------------------------------------------------------------------------


def export_memories(
    memory: Any, scopes: list[Scope | None], out: TextIO, store: str, page_size: int = 1000
) -> ExportSummary:
    """Write the header and every memory of each of ``scopes`` to ``out``.

    Args:
        memory: the SDK (``create_memory(store)``) over the source store.
        scopes: the scopes to export, in order (``None``: the unscoped namespace).
        out: a text stream; one line per memory.
        store: the source store's plugin name (recorded in the header).
        page_size: records per QUERY page (1-10000).

    Raises:
        TransferError: a QUERY failed (its code and safe message).
    """
    summary = ExportSummary()
    header = {"format": FORMAT, "version": VERSION, "store": store}
    out.write(json.dumps(header) + "\n")
    for scope in scopes:
        count = 0
        cursor: str | None = None
        while True:
            query: dict[str, Any] = {"limit": page_size}
            if cursor:
                query["cursor"] = cursor
            result = memory.query(query, scope=scope)
            if result.status != "success":
                raise TransferError(
                    f"QUERY failed in scope {scope_label(scope)}: {result.error.code}: "
                    f"{result.error.message}"
                )
            for item in result.output.items:
                out.write(_line(scope, item) + "\n")
            count += len(result.output.items)
            cursor = result.output.next_cursor
            if not cursor:
                break
        summary.counts[scope_label(scope)] = count
    return summary


def _line(scope: Scope | None, item: MemoryItem) -> str:
    data: dict[str, Any] = {"scope": None if scope is None else scope.to_header()}
    if scope is not None:
        data["scope"]["space"] = scope.space
    data.update(to_wire(item))
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


# --- reading and checking -----------------------------------------------------------------


def bad_line(line: int, where: str, message: str) -> TransferError:
    """The error of line ``line``: ``line N: <where>: <message>``."""
    return TransferError(f"line {line}: {where}: {message}")


def _header(text: str) -> None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise bad_line(1, "header", f"not a ditto-worker export (expected format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise bad_line(1, "header.version", f"version {VERSION} is the one this release reads")


def parse_record(text: str, line: int) -> Record:
    """One memory line as a :class:`Record`.

    Raises:
        TransferError: ``line N: <field>: <reason>`` — not JSON (with the column), not an
            object, an unknown or missing field, a scope, id, key, content, metadata or
            operationId the contracts refuse. The reason never quotes the value.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad_line(line, "JSON", f"{exc.msg} at column {exc.colno}") from None
    if not isinstance(data, dict):
        raise bad_line(line, "line", "must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise bad_line(line, unknown[0], "unknown field")
    for name in ("id", "content"):
        if name not in data:
            raise bad_line(line, name, "missing")
    try:
        scope = parse_scope(data.get("scope"))
    except MemoryError as exc:
        raise bad_line(line, "scope", exc.safe_message) from None
    try:
        check_operation_id(data.get("operationId"))
        item = MemoryItem.model_validate({k: v for k, v in data.items() if k != "scope"})
    except MemoryError as exc:
        raise bad_line(line, "operationId", exc.safe_message) from None
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "line"
        raise bad_line(line, where, first["msg"]) from None
    draft = {k: v for k, v in to_wire(item).items() if k in ("key", "content", "metadata")}
    return Record(line, scope, item.id, draft, item.operation_id)


def read_records(path: Path) -> Iterator[Record]:
    """The memory lines of the export file ``path``, checked one by one (the header
    first); blank lines are skipped.

    Raises:
        TransferError: a bad header or line (:func:`parse_record`), or a file that is not
            UTF-8.
    """
    with path.open(encoding="utf-8", newline="\n") as lines:
        try:
            for number, text in enumerate(lines, 1):
                if number == 1:
                    _header(text)
                elif text.strip():
                    yield parse_record(text, number)
        except UnicodeDecodeError:
            raise TransferError(f"{path.name}: not UTF-8 text") from None
