"""Spy stores and result helpers shared by the ``test_core_*`` unit tests.

Imported as ``tests.unit._spies``: with ``--import-mode=importlib`` pytest imports each
test file under its rootdir-relative name (``tests.unit.test_core_reads``) and sets up
``tests`` and ``tests.unit`` as namespace packages, so this module is found next to them
without touching ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from ditto_worker import ErrorInfo, MemoryCallOptions, NodeResult


class Spy:
    """A store without native search recording every call; ``outputs[op]`` is a value, an
    exception to raise, or ``f(input)``; an op not given returns ``defaults[op](input)``.

    Subclasses change what an op returns by default by overriding ``defaults``.
    """

    defaults: ClassVar[dict[str, Callable[[Any], Any]]] = {
        "get": lambda _: [],
        "query": lambda _: {"items": []},
        "search": lambda _: [],
        "write": lambda _: [],
        "update": lambda _: [],
        "delete": lambda _: {"deleted": []},
    }

    def __init__(self, **outputs: Any) -> None:
        self.calls: list[tuple[str, Any, MemoryCallOptions | None]] = []
        self.outputs = outputs

    def _call(self, op: str, input: Any, options: Any) -> Any:
        self.calls.append((op, input, options))
        out = self.outputs.get(op, self.defaults[op])
        if isinstance(out, BaseException):
            raise out
        return out(input) if callable(out) else out

    def ops(self) -> list[str]:
        return [op for op, _, _ in self.calls]

    def limits(self) -> list[int]:
        return [input.limit for _, input, _ in self.calls]

    def get(self, input: Any, options: Any = None) -> Any:
        return self._call("get", input, options)

    def query(self, input: Any, options: Any = None) -> Any:
        return self._call("query", input, options)

    def write(self, input: Any, options: Any = None) -> Any:
        return self._call("write", input, options)

    def update(self, input: Any, options: Any = None) -> Any:
        return self._call("update", input, options)

    def delete(self, input: Any, options: Any = None) -> Any:
        return self._call("delete", input, options)


class SearchSpy(Spy):
    """A spy store with a native ``search``."""

    def search(self, input: Any, options: Any = None) -> Any:
        return self._call("search", input, options)


T = TypeVar("T")


def out(result: NodeResult[T]) -> T:
    """The output of a successful result."""
    assert result.output is not None, result.error
    return result.output


def err(result: NodeResult[Any]) -> ErrorInfo:
    """The error of a failed result."""
    assert result.error is not None, result.status
    return result.error


def code(result: Any) -> str | None:
    return None if result.error is None else result.error.code
