"""A loopback Qdrant REST endpoint for the fault tests, backed by the client's local mode.

No Qdrant server can run on these machines, so the server-only lines of the plugin (the
HTTP client, ``wait=true`` on mutations, the ``api-key`` header, payload-index creation,
error mapping, per-request deadlines) are exercised against this double: it answers the
handful of REST calls the plugin makes (aliases and collection deletion included, for
the reindex) by running them on a ``QdrantClient(":memory:")``
and returning Qdrant's JSON envelope. It shows the HTTP path, not a server's semantics
(HNSW, payload indexes, concurrency are still local mode's).

Faults: ``mode`` is ``"ok"``, ``"503"`` (every request answered ``503``), ``"cut"`` (the
connection is closed without an answer) or ``"stall"`` (the request is read and never
answered until :meth:`RestDouble.close`); ``fail_upserts_after`` answers 503 to upserts
once that many have succeeded. Every request is recorded (method, path, query, api-key),
and so is every payload index asked for (local mode keeps none).
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel
from qdrant_client import QdrantClient, models

__all__ = ["RestDouble", "Seen"]


@dataclass
class Seen:
    """One request as received."""

    method: str
    path: str
    query: dict[str, list[str]]
    api_key: str | None


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


@dataclass
class RestDouble:
    """The endpoint (start with :meth:`start`, stop with :meth:`close`)."""

    mode: str = "ok"
    fail_upserts_after: int | None = None
    seen: list[Seen] = field(default_factory=list)
    indexes: dict[str, Any] = field(default_factory=dict)
    _release: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _upserts: int = 0

    def start(self) -> str:
        """Start serving on a free loopback port; returns ``http://127.0.0.1:<port>``."""
        self.local = QdrantClient(":memory:")
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                double.handle(self)

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _serve  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self.local.close()

    # --- one request ---------------------------------------------------------------------

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        length = int(request.headers.get("content-length") or 0)
        body = json.loads(request.rfile.read(length) or b"null")
        with self._lock:
            self.seen.append(Seen(request.command, parts.path, parse_qs(parts.query),
                                  request.headers.get("api-key")))  # fmt: skip
        if self.mode == "cut":
            request.close_connection = True
            request.connection.close()
            return
        if self.mode == "stall":
            self._release.wait(60)
            return
        status, result = 503, {"error": "Service Unavailable"}
        if self.mode == "ok":
            try:
                status, result = self._answer(request.command, parts.path, body)
            except (ValueError, KeyError) as exc:
                status, result = 400, {"error": type(exc).__name__}
        envelope = (
            {"result": result, "status": "ok", "time": 0.0}
            if status == 200
            else {"status": result, "time": 0.0}
        )
        raw = json.dumps(envelope).encode()
        request.send_response(status)
        request.send_header("content-type", "application/json")
        request.send_header("content-length", str(len(raw)))
        request.end_headers()
        request.wfile.write(raw)

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if path == "/aliases" and method == "GET":
            return 200, {"aliases": _json(self.local.get_aliases().aliases)}
        if path == "/collections/aliases" and method == "POST":
            change = models.ChangeAliasesOperation.model_validate(body)
            return 200, self.local.update_collection_aliases(change.actions)
        match = re.fullmatch(r"/collections/([^/]+)(/.*)?", path)
        if match is None:
            return 404, {"error": "not found"}
        name, rest = match.group(1), match.group(2) or ""
        local = self.local
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if rest == "/exists":
                return 200, {"exists": local.collection_exists(name)}
            if rest == "" and method == "GET":
                if not local.collection_exists(name):
                    return 404, {"error": "Not found: collection"}
                return 200, _json(local.get_collection(name))
            if rest == "" and method == "PUT":
                config = models.CreateCollection.model_validate(body)
                local.create_collection(name, vectors_config=config.vectors,
                                        sparse_vectors_config=config.sparse_vectors,
                                        metadata=config.metadata)  # fmt: skip
                return 200, True
            if rest == "" and method == "DELETE":
                return 200, local.delete_collection(name)
            if rest == "/index":
                index = models.CreateFieldIndex.model_validate(body)
                self.indexes[index.field_name] = _json(index.field_schema)
                return 200, _json(local.create_payload_index(name, index.field_name,
                                                             index.field_schema))  # fmt: skip
            return self._points(name, method, rest, body)

    def _points(self, name: str, method: str, rest: str, body: Any) -> tuple[int, Any]:
        local = self.local
        if rest == "/points" and method == "PUT":
            with self._lock:
                if self.fail_upserts_after is not None and self._upserts >= self.fail_upserts_after:
                    return 503, {"error": "Service Unavailable"}
                self._upserts += 1
            points = models.PointsList.model_validate(body)
            return 200, _json(local.upsert(name, points.points))
        if rest == "/points" and method == "POST":
            read = models.PointRequest.model_validate(body)
            return 200, _json(local.retrieve(name, read.ids, with_payload=read.with_payload,
                                             with_vectors=read.with_vector))  # fmt: skip
        if rest == "/points/scroll":
            scroll = models.ScrollRequest.model_validate(body)
            points, offset = local.scroll(
                name, scroll_filter=scroll.filter, limit=scroll.limit or 10,
                order_by=scroll.order_by, offset=scroll.offset,
                with_payload=scroll.with_payload, with_vectors=scroll.with_vector,
            )  # fmt: skip
            return 200, {"points": _json(points), "next_page_offset": offset}
        if rest == "/points/query":
            query = models.QueryRequest.model_validate(body)
            inner: Any = query.query
            vector = inner.nearest if isinstance(inner, models.NearestQuery) else inner
            found = local.query_points(
                name, query=vector, using=query.using, query_filter=query.filter,
                limit=query.limit or 10, with_payload=query.with_payload,
            )  # fmt: skip
            return 200, _json(found)
        if rest == "/points/delete":
            selector: Any = body
            if "points" in body:
                selector = models.PointIdsList.model_validate(body)
            else:
                selector = models.FilterSelector.model_validate(body)
            return 200, _json(local.delete(name, selector))
        if rest == "/points/vectors" and method == "PUT":
            update = models.UpdateVectors.model_validate(body)
            return 200, _json(local.update_vectors(name, update.points))
        return 404, {"error": "not found"}
