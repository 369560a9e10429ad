"""The LangChain ``BaseStore[str, bytes]`` over MEMORY nodes (see the package docstring)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.stores import BaseStore

from ditto_worker.integrations.langchain.calls import Calls, ScopeArg
from ditto_worker.runtime import Runtime

__all__ = ["DittoByteStore"]


class DittoByteStore(BaseStore[str, bytes]):
    """A LangChain ``BaseStore[str, bytes]`` over MEMORY nodes (module docstring).

    Args:
        runtime: ``create_ditto(...)``.
        scope: the trusted scope of every call.
        key_prefix: prepended to every key in the store (``lc-kv:``), so these records
            never meet a :class:`DittoVectorStore`'s in the same scope.
        timeout_s: each call's deadline, seconds; ``None``: ``fleet.callTimeoutS``.
    """

    def __init__(
        self,
        runtime: Runtime,
        scope: ScopeArg,
        *,
        key_prefix: str = "lc-kv:",
        timeout_s: float | None = None,
    ) -> None:
        if not key_prefix:
            raise ValueError("key_prefix must be non-empty")
        self._calls = Calls(runtime, scope, timeout_s)
        self.key_prefix = key_prefix

    def _values(self, keys: Sequence[str], found: list[dict[str, Any]]) -> list[bytes | None]:
        by_key = {i["key"]: base64.b64decode(i["content"]) for i in found}
        return [by_key.get(self.key_prefix + key) for key in keys]

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` in order; ``None`` for a missing key."""
        found = self._calls.run("MEMORY.GET", self._get(keys)) if keys else []
        return self._values(keys, found)

    async def amget(self, keys: Sequence[str]) -> list[bytes | None]:
        """:meth:`mget` on ``runtime.ainvoke``."""
        found = await self._calls.arun("MEMORY.GET", self._get(keys)) if keys else []
        return self._values(keys, found)

    def _get(self, keys: Sequence[str]) -> dict[str, Any]:
        return {"keys": list(dict.fromkeys(self.key_prefix + k for k in keys))}

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Set each key to its value (the last of a key given twice wins)."""
        pairs = dict(key_value_pairs)
        if pairs:
            found = self._calls.run("MEMORY.GET", self._get(list(pairs)))
            write, update = self._plan(pairs, found)
            if update:
                self._calls.run("MEMORY.UPDATE", {"memories": update})
            if write:
                self._calls.run("MEMORY.WRITE", {"memories": write})

    async def amset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`mset` on ``runtime.ainvoke``."""
        pairs = dict(key_value_pairs)
        if pairs:
            found = await self._calls.arun("MEMORY.GET", self._get(list(pairs)))
            write, update = self._plan(pairs, found)
            if update:
                await self._calls.arun("MEMORY.UPDATE", {"memories": update})
            if write:
                await self._calls.arun("MEMORY.WRITE", {"memories": write})

    def _plan(
        self, pairs: Mapping[str, bytes], found: list[dict[str, Any]]
    ) -> tuple[list[Any], list[Any]]:
        ids = {i["key"]: i["id"] for i in found}
        text = {self.key_prefix + k: base64.b64encode(v).decode("ascii") for k, v in pairs.items()}
        write = [{"key": k, "content": v} for k, v in text.items() if k not in ids]
        update = [{"id": ids[k], "content": v} for k, v in text.items() if k in ids]
        return write, update

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (missing ones ignored)."""
        found = self._calls.run("MEMORY.GET", self._get(keys)) if keys else []
        if found:
            self._calls.run("MEMORY.DELETE", {"ids": [i["id"] for i in found]})

    async def amdelete(self, keys: Sequence[str]) -> None:
        """:meth:`mdelete` on ``runtime.ainvoke``."""
        found = await self._calls.arun("MEMORY.GET", self._get(keys)) if keys else []
        if found:
            await self._calls.arun("MEMORY.DELETE", {"ids": [i["id"] for i in found]})

    def _page(self, prefix: str | None, cursor: str | None) -> dict[str, Any]:
        low = self.key_prefix + (prefix or "")
        high = low[:-1] + chr(ord(low[-1]) + 1)
        page: dict[str, Any] = {
            "filter": {"key": {"$gte": low, "$lt": high}},
            "orderBy": [{"field": "key"}],
            "limit": 500,
        }
        if cursor:
            page["cursor"] = cursor
        return page

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """Every key (starting with ``prefix``, if given), in key order."""
        cursor: str | None = None
        while True:
            page = self._calls.run("MEMORY.QUERY", self._page(prefix, cursor))
            yield from (i["key"][len(self.key_prefix) :] for i in page["items"])
            cursor = page.get("nextCursor")
            if not cursor:
                return

    async def ayield_keys(self, *, prefix: str | None = None) -> AsyncIterator[str]:
        """:meth:`yield_keys` on ``runtime.ainvoke``."""
        cursor: str | None = None
        while True:
            page = await self._calls.arun("MEMORY.QUERY", self._page(prefix, cursor))
            for item in page["items"]:
                yield item["key"][len(self.key_prefix) :]
            cursor = page.get("nextCursor")
            if not cursor:
                return
