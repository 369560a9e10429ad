"""Write the gateway's OpenAPI document for the built-in worker kinds (MEMORY, RETRIEVAL,
CONTEXT, INFER) to a file, for the TypeScript client's generated types.

Usage: ``python scripts/openapi.py clients/typescript/openapi.json``. The document is the
one ``ditto-worker serve`` publishes at ``/openapi.json`` with default settings; a test
(tests/integration/test_gateway_node.py) keeps the committed copy in step.
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any


def document() -> dict[str, Any]:
    """The OpenAPI document over the built-in kinds (embedded, nothing opened)."""
    from ditto_worker.config import load_runtime_config
    from ditto_worker.gateway import GatewaySettings, create_app
    from ditto_worker.runtime import create_ditto
    from ditto_worker.runtime.registry import worker_definitions

    with tempfile.TemporaryDirectory() as folder:
        config = load_runtime_config(
            {"plugins": {"sqlite": {"path": f"{folder}/memory.sqlite"}}}, env={}
        )
        builtin = [d for d in worker_definitions(config)
                   if d.kind in {"MEMORY", "RETRIEVAL", "CONTEXT", "INFER"}]  # fmt: skip
        runtime = create_ditto(builtin, config)
        settings = GatewaySettings.model_validate(
            {"tokens": [{"sha256": "0" * 64, "tenant": "t", "user": "u"}]}
        )
        try:
            return create_app(runtime, settings).openapi()
        finally:
            runtime.close()


def main() -> None:
    text = json.dumps(document(), indent=2, sort_keys=True) + "\n"
    with open(sys.argv[1], "w", encoding="utf-8") as file:
        file.write(text)


if __name__ == "__main__":
    main()
