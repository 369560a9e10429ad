"""The HTTP gateway (issue 26, SPEC.md MEM-RUN-5): every node callable from any language.

``ditto-worker serve`` runs :func:`create_app` on uvicorn. Importing this package imports
FastAPI, so the SDK and the fleet never import it; the ``gateway`` extra installs it.
"""

from ditto_worker.gateway.app import SPACE_HEADER, TIMEOUT_HEADER, create_app
from ditto_worker.gateway.auth import Authenticator, Identity
from ditto_worker.gateway.errors import STATUS_OF_CODE, GatewayError, http_status
from ditto_worker.gateway.settings import GatewaySettings, load_gateway_settings

__all__ = [
    "SPACE_HEADER",
    "STATUS_OF_CODE",
    "TIMEOUT_HEADER",
    "Authenticator",
    "GatewayError",
    "GatewaySettings",
    "Identity",
    "create_app",
    "http_status",
    "load_gateway_settings",
]
