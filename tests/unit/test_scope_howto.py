"""A ``PERMISSION_DENIED`` for a missing scope says where a scope comes from (issue 23
item 5): Python ``scope=``, the command line ``--scope`` — for every kind (MEMORY,
RETRIEVAL, CONTEXT, INFER, a kind of one's own), embedded; the fleet runs the same
:func:`~ditto_worker.runtime.execute.run_node` (tests/integration/test_cli.py calls a real
worker through ``ditto-worker invoke``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ditto_worker import create_context_worker, create_infer_worker
from ditto_worker.config import load_runtime_config
from ditto_worker.errors import MemoryError
from ditto_worker.memory.worker import create_memory_worker
from ditto_worker.retrieval.delegation import create_retrieval_worker
from ditto_worker.runtime import NodeSpec, WorkerDefinition, create_ditto
from ditto_worker.scope import SCOPE_HOWTO, Scope, missing_scope, resolve_scope
from ditto_worker.testing import InMemoryMemoryStore


def _own_kind() -> WorkerDefinition:
    spec = NodeSpec("OPS.PING", lambda input, ctx: {"pong": True})
    return WorkerDefinition.of("OPS", [spec], require_scope=True)


def _definitions() -> list[WorkerDefinition]:
    store = InMemoryMemoryStore()
    infer = create_infer_worker(
        {"baseUrl": "http://127.0.0.1:9/v1", "model": "m1"}, env={}, dotenv_path=None
    )
    return [
        create_memory_worker(store, require_scope=True),
        replace(create_retrieval_worker({"notes": store}), require_scope=True),
        replace(infer, require_scope=True),
        create_context_worker(),  # needs a scope for a cached context, bound or not
        _own_kind(),
    ]


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("MEMORY.QUERY", {}),
    ("RETRIEVAL.SEARCH", {"target": "notes", "query": "x"}),
    ("INFER.GENERATE", {"messages": [{"role": "user", "content": "hi"}]}),
    ("CONTEXT.LOAD", {"name": "plan"}),
    ("OPS.PING", {}),
]


@pytest.fixture(scope="module")
def runtime() -> Any:
    ditto = create_ditto(_definitions(), load_runtime_config(None, env={}))
    yield ditto
    ditto.close()


@pytest.mark.parametrize(("node", "input"), CALLS, ids=[c[0] for c in CALLS])
def test_a_missing_scope_says_how_to_give_one(runtime: Any, node: str, input: Any) -> None:
    result = runtime.invoke(node, input)
    assert result.status == "failed" and result.error.code == "PERMISSION_DENIED", result
    message = result.error.message
    assert message.endswith(SCOPE_HOWTO), message
    assert "scope=" in message and "--scope tenant=" in message


@pytest.mark.parametrize(("node", "input"), CALLS[:1] + CALLS[3:], ids=["MEMORY", "CONTEXT", "OPS"])
def test_with_a_scope_the_call_is_not_refused(runtime: Any, node: str, input: Any) -> None:
    result = runtime.invoke(node, input, scope={"tenant": "acme", "user": "alice"})
    assert result.status == "success", result


def test_other_scope_refusals_do_not_claim_the_scope_is_missing() -> None:
    with pytest.raises(MemoryError) as caught:
        resolve_scope(Scope("a", "b"), Scope("c", "d"), required=True)
    assert SCOPE_HOWTO not in caught.value.safe_message  # one was given: it is the wrong one
    assert missing_scope("x needs a scope") == f"x needs a scope; {SCOPE_HOWTO}"
