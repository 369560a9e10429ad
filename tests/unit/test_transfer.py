"""``ditto-worker export`` / ``import`` on the in-memory store (issue 27): what the file
holds, a round trip, a re-run that writes nothing twice, operation ids kept, bad lines
refused before anything is written (line number and field, never the content), and a
target that keeps no operation ids (MEM-RUN-7, MEM-WRITE-1, MEM-RET-4)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from ditto_worker import Scope, create_memory
from ditto_worker.cli.commands import app
from ditto_worker.cli.transfer import (
    TransferError,
    export_memories,
    list_scopes,
    parse_record,
    scope_of_namespace,
)
from ditto_worker.cli.transfer_import import import_memories
from ditto_worker.memory.capabilities import StoreCapabilities
from ditto_worker.testing import InMemoryMemoryStore

ALICE = Scope("acme", "alice")
TASK = Scope.for_task("acme", "alice", "t1")
SECRET = "secret-content-never-printed"


class NoOperationIds(InMemoryMemoryStore):
    """The in-memory store declaring no operation ids (as MySQL and Milvus do today)."""

    capabilities: ClassVar[StoreCapabilities] = replace(
        InMemoryMemoryStore.capabilities, operation_ids=False
    )


def _fill(memory: Any) -> None:
    """Keyed and keyless memories in two scopes and the unscoped namespace; one WRITE
    and one UPDATE with operation ids, the UPDATE touching records that are not adjacent."""
    first = [
        {"key": "pref", "content": SECRET, "metadata": {"kind": "preference", "v": 1}},
        {"content": {"nested": [1, None, "x"]}},
        {"key": "n", "content": None, "metadata": {}},
    ]
    written = memory.write({"memories": first}, scope=ALICE).output
    memory.write({"memories": [{"content": "between"}]}, scope=ALICE)
    memory.write(
        {"memories": [{"key": "cp", "content": {"stage": 1}}, {"content": "b"}]},
        scope=TASK,
        operation_id="task-1:stage-1",
    )
    memory.write({"memories": [{"content": "late"}]}, scope=ALICE)
    update = [{"id": written[0].id, "metadata": {"v": 2}}, {"id": written[2].id, "content": 3}]
    assert memory.update({"memories": update}, scope=ALICE, operation_id="upd-1").status == (
        "success"
    )
    memory.write({"memories": [{"key": "u", "content": "unscoped"}]})


def _export(memory: Any, path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        export_memories(memory, [ALICE, TASK, None], out, "memory", page_size=2)


def _items(memory: Any, scope: Scope | None) -> list[tuple[Any, ...]]:
    out = []
    cursor = None
    while True:
        page = memory.query({"limit": 3, **({"cursor": cursor} if cursor else {})}, scope=scope)
        out += [(i.key, i.content, i.metadata, i.operation_id) for i in page.output.items]
        cursor = page.output.next_cursor
        if not cursor:
            return out


def _sorted(items: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(items, key=lambda item: json.dumps(item[:3], sort_keys=True))


def test_the_file_holds_every_memory_with_its_scope_key_and_operation_id(tmp_path: Path) -> None:
    memory = create_memory(InMemoryMemoryStore())
    _fill(memory)
    path = tmp_path / "out.jsonl"
    _export(memory, path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"format": "ditto-memory-export", "version": 1, "store": "memory"}
    records = lines[1:]
    assert len(records) == 8
    alice = [r for r in records if r["scope"] == {"tenant": "acme", "user": "alice",
                                                  "space": "memory"}]  # fmt: skip
    assert [r.get("key") for r in alice] == ["pref", None, "n", None, None]  # creation order
    assert alice[0]["metadata"] == {"v": 2} and alice[0]["operationId"] == "upd-1"
    assert alice[2]["content"] == 3 and "content" in alice[1]
    task = [r for r in records if r["scope"] and r["scope"]["space"] == "task:t1"]
    assert {r["operationId"] for r in task} == {"task-1:stage-1"}
    assert records[-1]["scope"] is None and records[-1]["key"] == "u"


def test_round_trip_keeps_keys_content_metadata_and_operation_ids(tmp_path: Path) -> None:
    source = create_memory(InMemoryMemoryStore())
    _fill(source)
    path = tmp_path / "out.jsonl"
    _export(source, path)
    target = create_memory(InMemoryMemoryStore())
    summary = import_memories(target, path, keeps_operation_ids=True, batch_size=2)
    assert summary.records == 8
    for scope in (ALICE, TASK, None):
        want, got = _sorted(_items(source, scope)), _sorted(_items(target, scope))
        assert [w[:3] for w in want] == [g[:3] for g in got]
        for (_, _, _, op_want), (_, _, _, op_got) in zip(want, got, strict=True):
            if op_want is None:
                assert op_got is not None and op_got.startswith("ditto-import:")
            else:
                assert op_got == op_want  # kept, with the target's ledger
    # creation order is kept, except that one operation's records are written together,
    # where the last of them is: pref (upd-1) moves after the keyless record before n
    order = [(i[0], i[1]) for i in _items(target, ALICE)]
    assert order == [(None, {"nested": [1, None, "x"]}), ("pref", SECRET), ("n", 3),
                     (None, "between"), (None, "late")]  # fmt: skip
    # the replayed UPDATE of the task is refused, not applied again
    again = target.update({"memories": [{"id": "x", "content": 1}]}, scope=ALICE,
                          operation_id="upd-1")  # fmt: skip
    assert again.error is not None and again.error.code == "CONFLICT"


def test_a_re_run_writes_nothing_twice(tmp_path: Path) -> None:
    source = create_memory(InMemoryMemoryStore())
    _fill(source)
    path = tmp_path / "out.jsonl"
    _export(source, path)
    target = create_memory(InMemoryMemoryStore())
    import_memories(target, path, keeps_operation_ids=True, batch_size=2)
    before = {s: _items(target, s) for s in (ALICE, TASK, None)}
    import_memories(target, path, keeps_operation_ids=True, batch_size=2)
    assert {s: _items(target, s) for s in (ALICE, TASK, None)} == before


def test_scope_override_writes_every_line_into_one_scope(tmp_path: Path) -> None:
    source = create_memory(InMemoryMemoryStore())
    _fill(source)
    path = tmp_path / "out.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_memories(source, [ALICE], out, "memory")
    target = create_memory(InMemoryMemoryStore())
    bob = Scope("other", "bob")
    import_memories(target, path, keeps_operation_ids=True, override=bob)
    got, want = _sorted(_items(target, bob)), _sorted(_items(source, ALICE))
    assert [i[:3] for i in got] == [i[:3] for i in want]
    assert _items(target, ALICE) == []


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: "{not json", "line 4: JSON: Expecting property name"),
        (lambda r: "[1, 2]", "line 4: line: must be a JSON object"),
        (lambda r: json.dumps({**r, "vector": [0.1]}), "line 4: vector: unknown field"),
        (lambda r: json.dumps({k: v for k, v in r.items() if k != "content"}),
         "line 4: content: missing"),
        (lambda r: json.dumps({**r, "key": ""}), "line 4: key: String should have at least"),
        (lambda r: json.dumps({**r, "metadata": [SECRET]}), "line 4: metadata: "),
        (lambda r: json.dumps({**r, "operationId": "a\nb"}), "line 4: operationId: "),
        (lambda r: json.dumps({**r, "scope": {"tenant": "t"}}), "line 4: scope: "),
        (lambda r: json.dumps({**r, "id": 7}), "line 4: id: "),
    ],
)  # fmt: skip
def test_a_bad_line_names_line_and_field_and_nothing_is_written(
    tmp_path: Path, change: Any, expected: str
) -> None:
    source = create_memory(InMemoryMemoryStore())
    _fill(source)
    path = tmp_path / "out.jsonl"
    _export(source, path)
    lines = _lines(path)
    lines[3] = change(json.loads(lines[3]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = create_memory(InMemoryMemoryStore())
    with pytest.raises(TransferError) as caught:
        import_memories(target, bad, keeps_operation_ids=True, batch_size=1)
    assert str(caught.value).startswith(expected), str(caught.value)
    assert SECRET not in str(caught.value)
    assert all(_items(target, s) == [] for s in (ALICE, TASK, None))  # line 2 neither


def test_header_and_repeated_lines_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"content": 1, "id": "a"}\n', encoding="utf-8")
    target = create_memory(InMemoryMemoryStore())
    with pytest.raises(TransferError, match="line 1: header: not a ditto-worker export"):
        import_memories(target, path, keeps_operation_ids=True)
    header = json.dumps({"format": "ditto-memory-export", "version": 1, "store": "x"})
    line = json.dumps({"scope": None, "id": "a", "key": "k", "content": 1})
    other = json.dumps({"scope": None, "id": "b", "key": "k", "content": 2})
    path.write_text(f"{header}\n{line}\n{line}\n", encoding="utf-8")
    with pytest.raises(TransferError, match="line 3: id: repeats"):
        import_memories(target, path, keeps_operation_ids=True)
    path.write_text(f"{header}\n{line}\n{other}\n", encoding="utf-8")
    with pytest.raises(TransferError, match="line 3: key: repeats"):
        import_memories(target, path, keeps_operation_ids=True)
    assert _items(target, None) == []


def test_a_refused_write_names_the_line_without_content(tmp_path: Path) -> None:
    header = json.dumps({"format": "ditto-memory-export", "version": 1, "store": "x"})
    line = json.dumps({"scope": None, "id": "a", "key": "taken", "content": SECRET})
    path = tmp_path / "x.jsonl"
    path.write_text(f"{header}\n\n{line}\n", encoding="utf-8")
    target = create_memory(InMemoryMemoryStore())
    target.write({"memories": [{"key": "taken", "content": "other"}]})
    with pytest.raises(TransferError) as caught:
        import_memories(target, path, keeps_operation_ids=True)
    assert str(caught.value).startswith("line 3: CONFLICT: ")
    assert SECRET not in str(caught.value)


def test_a_target_without_operation_ids_skips_what_it_holds(tmp_path: Path) -> None:
    source = create_memory(InMemoryMemoryStore())
    _fill(source)
    path = tmp_path / "out.jsonl"
    _export(source, path)
    target = create_memory(NoOperationIds())
    first = import_memories(target, path, keeps_operation_ids=False, batch_size=3)
    assert first.dropped_operation_ids == 4 and first.skipped == 0
    assert first.not_idempotent == 4  # keyless: a re-run writes them again
    for scope in (ALICE, TASK, None):
        assert [i[:3] for i in _items(target, scope)] == [i[:3] for i in _items(source, scope)]
        assert all(i[3] is None for i in _items(target, scope))
    again = import_memories(target, path, keeps_operation_ids=False, batch_size=3)
    assert again.skipped == 4  # every keyed memory is already there
    assert len(_items(target, ALICE)) == 5 + 3  # the three keyless ones of alice again


def test_a_key_held_with_other_content_is_refused(tmp_path: Path) -> None:
    header = json.dumps({"format": "ditto-memory-export", "version": 1, "store": "x"})
    line = json.dumps({"scope": None, "id": "a", "key": "k", "content": SECRET})
    path = tmp_path / "x.jsonl"
    path.write_text(f"{header}\n{line}\n", encoding="utf-8")
    target = create_memory(NoOperationIds())
    target.write({"memories": [{"key": "k", "content": "other"}]})
    with pytest.raises(TransferError, match="line 2: key: the target holds it with other"):
        import_memories(target, path, keeps_operation_ids=False)


def test_export_pages_and_never_reads_more_than_a_page() -> None:
    store = InMemoryMemoryStore()
    memory = create_memory(store)
    memory.write({"memories": [{"content": i} for i in range(7)]})
    limits: list[int] = []
    real = store.query

    def spy(input: Any, options: Any = None) -> Any:
        limits.append(input.limit)
        return real(input, options)

    store.query = spy  # type: ignore[method-assign]
    out = io.StringIO()
    summary = export_memories(memory, [None], out, "memory", page_size=3)
    assert summary.counts == {"unscoped": 7} and limits == [3, 3, 3]
    assert [json.loads(x)["content"] for x in out.getvalue().splitlines()[1:]] == list(range(7))


def test_parse_record_refuses_without_quoting_the_value() -> None:
    with pytest.raises(TransferError) as caught:
        parse_record(json.dumps({"id": "a", "content": SECRET, "key": 5}), 9)
    assert str(caught.value).startswith("line 9: key: ") and SECRET not in str(caught.value)


def test_the_commands_on_the_embedded_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    env = {"DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "a.sqlite"), "DITTO_BROKER_URL": ""}
    write = json.dumps({"memories": [{"key": "k", "content": SECRET}, {"content": 2}]})
    wrote = runner.invoke(app, ["invoke", "MEMORY.WRITE", write, "--scope",
                                "tenant=acme,user=alice"], env=env)  # fmt: skip
    assert wrote.exit_code == 0, wrote.output
    out = tmp_path / "a.jsonl"
    exported = runner.invoke(app, ["export", "--scope", "tenant=acme,user=alice", "-o",
                                   str(out)], env=env)  # fmt: skip
    assert exported.exit_code == 0, exported.output
    assert "export: 2 memories from sqlite (acme/alice/memory: 2)" in exported.output
    assert SECRET not in exported.output
    other = {**env, "DITTO_WORKER_MEMORY_SQLITE_PATH": str(tmp_path / "b.sqlite")}
    for _ in range(2):
        imported = runner.invoke(app, ["import", str(out)], env=other)
        assert imported.exit_code == 0, imported.output
        assert "import: 2 memories read, 1 WRITE calls" in imported.output
    listed = runner.invoke(app, ["export", "--scope", "tenant=acme,user=alice"], env=other)
    assert [json.loads(x).get("key") for x in listed.stdout.splitlines()[1:]] == ["k", None]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(out.read_text(encoding="utf-8") + "{}\n", encoding="utf-8")
    refused = runner.invoke(app, ["import", str(bad)], env=other)
    assert refused.exit_code == 1 and "import: line 4: id: missing" in refused.output
    wrong = runner.invoke(app, ["export", "--scope", "tenant=acme"], env=env)
    assert wrong.exit_code == 2 and "--scope: user missing" in wrong.output


@pytest.mark.parametrize(
    "scope",
    [None, Scope("acme", "alice"), Scope("a:b%c", "u:1"), Scope.for_task("t", "u", "x:y%")],
)
def test_namespaces_map_back_to_their_scopes(scope: Scope | None) -> None:
    ns = "" if scope is None else scope.namespace
    assert scope_of_namespace(ns) == scope


@pytest.mark.parametrize("namespace", ["a:b", "a:b:other", "a:b:task", "%ZZ:b:memory"])
def test_a_namespace_no_scope_makes_is_refused(namespace: str) -> None:
    with pytest.raises(TransferError, match="no scope makes"):
        scope_of_namespace(namespace)


def test_all_scopes_are_listed_by_the_store() -> None:
    store = InMemoryMemoryStore()
    _fill(create_memory(store))
    assert list_scopes(store) == [None, ALICE, TASK]
    with pytest.raises(TransferError, match="cannot list its scopes"):
        list_scopes(object())
