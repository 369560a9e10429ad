"""Skip or fail a test whose service, model or setting is missing (STYLE.md; issue 25 item 7).

Locally a missing Redis, PostgreSQL, local model or plugin skips the test that needs it;
in CI it fails: the seed's acceptance rule "missing configuration fails instead of
skipping". CI is recognised by either of

* ``DITTO_REQUIRE_SERVICES=1`` — set by ``scripts/test.sh`` (and so by ``.ci/run``);
* ``CI=true`` (or ``1``/``yes``) — set by GitHub Actions, GitLab CI, the workplace's CI
  runner and most others, so a test run started by a CI system without
  ``scripts/test.sh`` fails too.

Every conftest and test of the repository reaches this one rule through
:func:`missing_service` (``tests/conftest.py`` and the plugins' conftests re-export it).
Importing this module imports pytest only when a test calls :func:`missing_service`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NoReturn

__all__ = ["missing_service", "services_required"]

_TRUE = frozenset({"1", "true", "yes", "on"})


def services_required(env: Mapping[str, str] | None = None) -> bool:
    """True when a missing service must fail the test rather than skip it.

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        ``DITTO_REQUIRE_SERVICES`` is ``1``, or ``CI`` is ``true``/``1``/``yes``/``on``
        (any case).
    """
    env = os.environ if env is None else env
    if env.get("DITTO_REQUIRE_SERVICES", "").strip() == "1":
        return True
    return env.get("CI", "").strip().lower() in _TRUE


def missing_service(reason: str, env: Mapping[str, str] | None = None) -> NoReturn:
    """Skip the calling test with ``reason`` locally; fail it in CI.

    Args:
        reason: what is missing and how to get it (no credentials: it is printed).
        env: the environment to read (default ``os.environ``).

    Raises:
        pytest.fail.Exception: :func:`services_required` is true (the message starts
            ``required service missing:``).
        pytest.skip.Exception: otherwise.
    """
    import pytest

    if services_required(env):
        pytest.fail(f"required service missing: {reason}")
    pytest.skip(reason)
