"""The write side of ``ditto-worker import`` (:mod:`ditto_worker.cli.transfer` has the
file format, the reading and checking of lines, and the rules this module follows: every
line checked before anything is written, then MEMORY.WRITE calls that each carry an
operation id, so a re-run is a replay)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ditto_worker.cli.transfer import Record, TransferError, bad_line, read_records
from ditto_worker.errors import ErrorCode
from ditto_worker.memory.operations import json_equal
from ditto_worker.scope import Scope

__all__ = ["ImportSummary", "check_file", "import_memories"]

_IMPORT_PREFIX: Final = "ditto-import:"


@dataclass
class ImportSummary:
    """What an import did.

    Attributes:
        records: memory lines read.
        writes: WRITE calls made (a replayed one included).
        skipped: records skipped because the target holds their key with equal content and
            metadata (targets without operation ids only).
        dropped_operation_ids: records whose operation id the target could not keep.
        not_idempotent: keyless records written to a target without operation ids: a
            re-run would write them again.
        expired: records of WRITEs the target answered ``OPERATION_EXPIRED``: imported
            by a run older than its ``operationRetentionS``; nothing written again.
    """

    records: int = 0
    writes: int = 0
    skipped: int = 0
    dropped_operation_ids: int = 0
    not_idempotent: int = 0
    expired: int = 0


def _digest(*parts: Any) -> bytes:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def check_file(path: Path, override: Scope | None) -> dict[tuple[str, str], int]:
    """Check every line of ``path`` before anything is written.

    Returns:
        The number of records per ``(namespace, operation id)``.

    Raises:
        TransferError: a bad line, or a line repeating an earlier line's id or key in the
            same target scope (it would be written twice or conflict).
    """
    seen: set[bytes] = set()
    groups: dict[tuple[str, str], int] = {}
    for record in read_records(path):
        ns = _namespace(override or record.scope)
        for name, value in (("id", record.source_id), ("key", record.draft.get("key"))):
            if value is None:
                continue
            mark = _digest(name, ns, value)[:12]
            if mark in seen:
                raise bad_line(record.line, name, "repeats an earlier line's in the same scope")
            seen.add(mark)
        if record.operation_id is not None:
            group = (ns, record.operation_id)
            groups[group] = groups.get(group, 0) + 1
    return groups


def _namespace(scope: Scope | None) -> str:
    return "" if scope is None else scope.namespace


# --- import -------------------------------------------------------------------------------


_INDEX = re.compile(r"memories\[(\d+)\]")


class _Importer:
    """The write pass of :func:`import_memories`."""

    def __init__(
        self, memory: Any, keeps_ids: bool, override: Scope | None, batch_size: int
    ) -> None:
        self.memory, self.keeps_ids, self.override = memory, keeps_ids, override
        self.batch_size = batch_size
        self.summary = ImportSummary()
        self.run: list[Record] = []
        self.groups: dict[tuple[str, str], list[Record]] = {}

    def scope_of(self, record: Record) -> Scope | None:
        return self.override or record.scope

    def add(self, record: Record, sizes: dict[tuple[str, str], int]) -> None:
        self.summary.records += 1
        scope = self.scope_of(record)
        if record.operation_id is not None and self.keeps_ids:
            group = (_namespace(scope), record.operation_id)
            members = self.groups.setdefault(group, [])
            members.append(record)
            if len(members) == sizes[group]:
                self.flush()  # creation order: what came before is written first
                self.write(scope, self.groups.pop(group), record.operation_id)
            return
        if record.operation_id is not None:
            self.summary.dropped_operation_ids += 1
        if self.run and (len(self.run) >= self.batch_size or self.scope_of(self.run[0]) != scope):
            self.flush()
        self.run.append(record)

    def flush(self) -> None:
        if not self.run:
            return
        records, self.run = self.run, []
        scope = self.scope_of(records[0])
        if self.keeps_ids:
            made = _digest(_namespace(scope), [(r.source_id, r.draft) for r in records]).hex()
            self.write(scope, records, _IMPORT_PREFIX + made[:48])
            return
        records = self.unwritten(scope, records)
        self.summary.not_idempotent += sum(1 for r in records if "key" not in r.draft)
        if records:
            self.write(scope, records, None)

    def unwritten(self, scope: Scope | None, records: list[Record]) -> list[Record]:
        """``records`` less those whose key the target holds with equal content and
        metadata (written by an earlier run).

        Raises:
            TransferError: the target holds a key with other content or metadata.
        """
        keys = [r.draft["key"] for r in records if "key" in r.draft]
        if not keys:
            return records
        result = self.memory.get({"keys": keys}, scope=scope)
        self.check(result, records)
        held = {item.key: item for item in result.output}
        left = []
        for record in records:
            item = held.get(record.draft.get("key"))
            if item is None:
                left.append(record)
                continue
            same = json_equal(item.content, record.draft["content"]) and json_equal(
                item.metadata or {}, record.draft.get("metadata") or {}
            )
            if not same:
                raise bad_line(record.line, "key", "the target holds it with other content")
            self.summary.skipped += 1
        return left

    def write(self, scope: Scope | None, records: list[Record], operation_id: str | None) -> None:
        drafts = [r.draft for r in records]
        result = self.memory.write({"memories": drafts}, scope=scope, operation_id=operation_id)
        self.summary.writes += 1
        if result.error is not None and result.error.code == ErrorCode.OPERATION_EXPIRED:
            self.summary.expired += len(records)  # an old run wrote them: not again
            return
        self.check(result, records)

    def check(self, result: Any, records: list[Record]) -> None:
        if result.status == "success":
            return
        message = result.error.message
        found = _INDEX.search(message)
        if found and int(found.group(1)) < len(records):
            where = f"line {records[int(found.group(1))].line}"
        else:
            lines = sorted(r.line for r in records)
            where = f"lines {lines[0]}-{lines[-1]}" if len(lines) > 1 else f"line {lines[0]}"
        raise TransferError(
            f"{where}: {result.error.code}: {message} (the batches before it are written)"
        )


def import_memories(
    memory: Any,
    path: Path,
    keeps_operation_ids: bool,
    override: Scope | None = None,
    batch_size: int = 500,
) -> ImportSummary:
    """Import the export file ``path`` through ``memory`` (module doc).

    Args:
        memory: the SDK (``create_memory(store)``) over the target store.
        path: the export file (a seekable file: it is read twice, checked then written).
        keeps_operation_ids: the target declares ``capabilities.operation_ids``.
        override: write every record into this scope instead of the one on its line.
        batch_size: records per WRITE for records without an operation id (a re-run is a
            replay only with the same batch size).

    Returns:
        What was done (:class:`ImportSummary`).

    Raises:
        TransferError: a bad line (nothing written), or a WRITE/GET the target refused
            (the batches before it stay written; a re-run replays them).
    """
    sizes = check_file(path, override)
    importer = _Importer(memory, keeps_operation_ids, override, batch_size)
    for record in read_records(path):
        importer.add(record, sizes)
    importer.flush()
    return importer.summary
