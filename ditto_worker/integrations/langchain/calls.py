"""Node calls for the LangChain adapters: one runtime, one trusted scope; a failure raises
:class:`DittoLangChainError`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.exceptions import LangChainException

from ditto_worker.contracts import NodeResult
from ditto_worker.runtime import Runtime
from ditto_worker.scope import Scope

__all__ = ["Calls", "DittoLangChainError", "ScopeArg", "to_json"]

ScopeArg = Scope | Mapping[str, str]


class DittoLangChainError(LangChainException):
    """A node call that did not succeed.

    Attributes:
        code: the NodeResult's error code (``INVALID_INPUT``, ``PERMISSION_DENIED`` …).
    """

    def __init__(self, node: str, code: str, message: str) -> None:
        super().__init__(f"{node} {code}: {message}")
        self.code = code


class Calls:
    """Node calls on one runtime for one scope; a failure raises."""

    def __init__(self, runtime: Runtime, scope: ScopeArg, timeout_s: float | None) -> None:
        self.runtime, self.scope, self.timeout_s = runtime, scope, timeout_s

    def run(self, node: str, input: Any) -> Any:
        result = self.runtime.invoke(node, input, scope=self.scope, timeout=self.timeout_s)
        return _output(result)

    async def arun(self, node: str, input: Any) -> Any:
        result = await self.runtime.ainvoke(node, input, scope=self.scope, timeout=self.timeout_s)
        return _output(result)


def _output(result: NodeResult[Any]) -> Any:
    if result.status != "success" or result.error is not None:
        code = result.error.code if result.error else result.status.upper()
        message = result.error.message if result.error else result.status
        raise DittoLangChainError(result.node, code, message)
    return to_json(result.output)


def to_json(value: Any) -> Any:
    """Contract models (or lists of them) as wire JSON; JSON data as is."""
    from pydantic import BaseModel

    from ditto_worker.contracts import to_wire

    if isinstance(value, BaseModel):
        return to_wire(value)
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value
