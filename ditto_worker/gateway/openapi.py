"""Each node's request and response schema in the OpenAPI document, from its contracts.

A node declares its input model as it declares its output (:class:`~ditto_worker.runtime.
NodeSpec` ``input`` / ``output``); the schema of the request body is the input model's
JSON schema (validation mode, wire names), the schema of every answer the NodeResult
around the output (validation mode too: the contracts omit unset optionals when they
serialize, which a serialization schema cannot show). Kinds without a declared input take any JSON.
Model definitions land in ``components/schemas`` through FastAPI's ``openapi_extra``:
each route carries the ``$defs`` it references, merged by :func:`merge_components`.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from ditto_worker.contracts import NodeResult
from ditto_worker.runtime import NodeSpec

__all__ = ["ANSWERED_STATUSES", "merge_components", "node_openapi"]

REF = "#/components/schemas/{model}"

ANSWERED_STATUSES = ("200", "401", "403", "404", "409", "413", "422", "429", "499", "500",
                     "502", "503", "504")  # fmt: skip
"""Every status a node route can answer with (the table in :mod:`.errors`)."""

_DEFS_KEY = "x-ditto-defs"


def _schema(tp: Any, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = TypeAdapter(tp).json_schema(by_alias=True, ref_template=REF, mode=mode)  # type: ignore[arg-type]
    defs = schema.pop("$defs", {})
    return schema, defs


def node_openapi(node: str, spec: NodeSpec) -> dict[str, Any]:
    """The ``openapi_extra`` of ``POST /v1/nodes/{node}``: request body, answers, defs.

    The request body and the answer are named schemas in ``components/schemas``:
    ``<Kind><Name>Request`` (the input model's schema; ``{}`` = any JSON without one) and
    ``<Kind><Name>NodeResult`` (the NodeResult around the output), so generated clients get
    one named type per node.
    """
    stem = "".join(part.capitalize() for part in node.replace("_", ".").split("."))
    request, defs = _schema(spec.input, "validation") if spec.input is not None else ({}, {})
    output: Any = spec.output if spec.output is not None else Any
    # validation mode: the contracts' wrap serializer (unset optionals omitted) hides the
    # fields from a serialization schema; the answer is exactly a valid NodeResult
    answer, answer_defs = _schema(NodeResult[output], "validation")
    defs.update(answer_defs)
    defs[f"{stem}Request"] = {**request, "title": f"{stem}Request"}
    defs[f"{stem}NodeResult"] = {**answer, "title": f"{stem}NodeResult"}
    body = {"application/json": {"schema": {"$ref": REF.format(model=f"{stem}NodeResult")}}}
    responses = {
        status: {"description": _DESCRIPTIONS.get(status, "A NodeResult."), "content": body}
        for status in ANSWERED_STATUSES
    }
    request_body = {"$ref": REF.format(model=f"{stem}Request")}
    return {
        "summary": f"Call {node}",
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request_body}},
        },
        "responses": responses,
        _DEFS_KEY: defs,
    }


def merge_components(document: dict[str, Any]) -> dict[str, Any]:
    """Move every route's ``x-ditto-defs`` into ``components/schemas`` (in place).

    Raises:
        ValueError: two different schemas share a name.
    """
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for name, schema in operation.pop(_DEFS_KEY, {}).items():
                if schemas.setdefault(name, schema) != schema:
                    # two models of one name (a node's NodeResult vs a contract model):
                    # one would silently replace the other in every generated client
                    raise ValueError(f"two different OpenAPI schemas are named {name!r}")
    return document


_DESCRIPTIONS = {
    "200": "Success: the NodeResult with its output.",
    "401": "UNAUTHENTICATED: no valid bearer token.",
    "403": "PERMISSION_DENIED: the node, space or scope is not allowed.",
    "404": "UNKNOWN_NODE or NOT_FOUND.",
    "409": "CONFLICT.",
    "413": "PAYLOAD_TOO_LARGE.",
    "422": "INVALID_INPUT (the field at fault named) and other input codes.",
    "429": "OVERLOADED: too many calls in flight; Retry-After.",
    "499": "Cancelled (the client closed the connection, or the call was revoked).",
    "500": "A code without its own status (a plugin's own code).",
    "502": "INVALID_BACKEND_OUTPUT or INFER_INVALID_OUTPUT.",
    "503": "FLEET_UNAVAILABLE or a *_UNAVAILABLE backend; Retry-After.",
    "504": "The call's deadline passed (*_TIMEOUT).",
}
