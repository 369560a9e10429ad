"""Bearer identities of the HTTP gateway: the only source of a call's trusted scope.

A request's ``Authorization: Bearer <token>`` is either a static token (matched by its
SHA-256 digest against ``gateway.tokens``) or, when ``gateway.jwt`` is set, a JWT verified
by PyJWT (signature, ``exp`` required, ``nbf``, audience, issuer). Either way the result is
an :class:`Identity` ``(tenant, user)`` with the nodes and spaces it may use; nothing in
the request body or any other header can change it (issue 26 item 2; SPEC.md MEM-RUN-5,
MEM-PY-3). Tokens are never logged, and no answer says why a token failed beyond
"invalid or expired".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ditto_worker.errors import ErrorCode
from ditto_worker.gateway.errors import GatewayError
from ditto_worker.gateway.settings import GatewaySettings, JwtSettings, StaticToken

__all__ = ["Authenticator", "Identity"]


@dataclass(frozen=True)
class Identity:
    """A verified caller.

    Attributes:
        tenant: the tenant every call of this identity is scoped to.
        user: the user every call of this identity is scoped to.
        grants: the nodes and spaces it may use (a token entry or the JWT section).
    """

    tenant: str
    user: str
    grants: StaticToken | JwtSettings

    def check(self, node: str, space: str) -> None:
        """Raise unless :attr:`grants` allow ``node`` in ``space``.

        Raises:
            GatewayError: ``PERMISSION_DENIED`` naming the node or the space.
        """
        if not self.grants.allows_node(node):
            raise GatewayError(ErrorCode.PERMISSION_DENIED, f"this token may not call {node}")
        if not self.grants.allows_space(space):
            raise GatewayError(
                ErrorCode.PERMISSION_DENIED, f"this token may not use the space {space[:80]!r}"
            )


class Authenticator:
    """Turns an ``Authorization`` header into an :class:`Identity`.

    Raises (from :meth:`identify`):
        GatewayError: ``UNAUTHENTICATED`` (401) for a missing, malformed, unknown, badly
            signed or expired token.
    """

    def __init__(self, settings: GatewaySettings) -> None:
        self._tokens = {token.sha256: token for token in settings.tokens}
        self._jwt = settings.jwt
        self._jwks: Any = None
        self._key = settings.jwt.key() if settings.jwt is not None else ""

    @property
    def configured(self) -> bool:
        """True when any identity can pass (a server with none refuses to start)."""
        return bool(self._tokens) or self._jwt is not None

    def identify(self, authorization: str | None) -> Identity:
        """The identity of ``authorization`` (``Bearer <token>``)."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise GatewayError.unauthenticated("a bearer token is required")
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        static = self._tokens.get(digest)
        if static is not None:
            return Identity(static.tenant, static.user, static)
        if self._jwt is not None and token.count(".") == 2:
            return self._verify_jwt(token, self._jwt)
        raise GatewayError.unauthenticated("the bearer token is invalid or expired")

    def _verify_jwt(self, token: str, settings: JwtSettings) -> Identity:
        import jwt

        try:
            key: Any = self._key
            if settings.jwks_url:
                if self._jwks is None:
                    self._jwks = jwt.PyJWKClient(settings.jwks_url, timeout=5)
                key = self._jwks.get_signing_key_from_jwt(token).key
            claims = jwt.decode(
                token,
                key,
                algorithms=list(settings.algorithms),
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway_s,
                options={"require": ["exp"]},
            )
        except jwt.PyJWTError:
            raise GatewayError.unauthenticated("the bearer token is invalid or expired") from None
        tenant, user = claims.get(settings.tenant_claim), claims.get(settings.user_claim)
        if (
            not isinstance(tenant, str)
            or not isinstance(user, str)
            or not (_claim(tenant) and _claim(user))
        ):
            raise GatewayError.unauthenticated(
                f"the token lacks the claims {settings.tenant_claim!r} and {settings.user_claim!r}"
            )
        return Identity(tenant, user, settings)


def _claim(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256
