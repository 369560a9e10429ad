"""Adapters that plug ditto-worker into agent frameworks (issue 33), one per framework.

Each lives in its own module or subpackage and needs its own extra, so importing this
package imports none of those libraries:

* :mod:`ditto_worker.integrations.mcp` — an MCP server (the official ``mcp`` SDK) whose
  tools are the MEMORY nodes: ``pip install 'ditto-worker[mcp]'`` (docs/integrations-mcp.md).
* :mod:`ditto_worker.integrations.langchain` — a LangChain ``VectorStore`` and a
  ``BaseStore[str, bytes]``: ``pip install 'ditto-worker[langchain]'``
  (docs/integrations-langchain.md).

* :mod:`ditto_worker.integrations.langgraph` — LangGraph's ``BaseStore`` (``DittoStore``):
  ``pip install 'ditto-worker[langgraph]'`` (docs/integrations-langgraph.md).

Every adapter calls the nodes through a :class:`~ditto_worker.runtime.Runtime`, embedded
or on a fleet, under a trusted scope its host gives (never one from a tool argument,
a document or a model).
"""

from __future__ import annotations

__all__: list[str] = []
