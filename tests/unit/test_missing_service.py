"""The skip-or-fail rule of tests whose service is missing (issue 25 item 7: "missing
configuration fails instead of skipping under CI=true"; STYLE.md).

:func:`ditto_worker.testing.services.missing_service` is the one rule every conftest and
acceptance test reaches; here it is checked on its own, with the environment given.
"""

from __future__ import annotations

import pytest

from ditto_worker.testing.services import missing_service, services_required
from tests import conftest


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"CI": "TRUE"}, True),
        ({"CI": "1"}, True),
        ({"CI": "yes"}, True),
        ({"CI": "false"}, False),
        ({"CI": "0"}, False),
        ({"CI": ""}, False),
        ({"DITTO_REQUIRE_SERVICES": "1"}, True),
        ({"DITTO_REQUIRE_SERVICES": "0"}, False),
        ({"DITTO_REQUIRE_SERVICES": "0", "CI": "true"}, True),
    ],
)
def test_services_are_required_in_ci(env: dict[str, str], required: bool) -> None:
    assert services_required(env) is required


@pytest.mark.parametrize("env", [{"CI": "true"}, {"DITTO_REQUIRE_SERVICES": "1"}])
def test_a_missing_service_fails_in_ci(env: dict[str, str]) -> None:
    with pytest.raises(pytest.fail.Exception, match="required service missing: no model"):
        missing_service("no model", env)


def test_a_missing_service_skips_locally() -> None:
    with pytest.raises(pytest.skip.Exception, match="no model"):
        missing_service("no model", {"CI": "false"})


@pytest.mark.parametrize(
    ("ci", "raised"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_the_suites_helper_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, ci: str, raised: type[BaseException]
) -> None:
    # tests/conftest.py's helper (used by the acceptance suite) reads os.environ
    monkeypatch.delenv("DITTO_REQUIRE_SERVICES", raising=False)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(raised):
        conftest.missing_service("no PostgreSQL")
