"""Nothing secret on disk (issue 35 item 2): a secret in the conversation reaches neither the
task directory (request.json, requests/, checkpoints, artifacts) nor the database files,
and a resume from the redacted request decides as the first run did.

The model is the scripted fake endpoint (``tests.unit.test_cli_example``'s ``cli``).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from ditto_worker.memory_tasks import run_write
from ditto_worker.memory_tasks.policy import find_secrets
from ditto_worker.memory_tasks.secret_shapes import redact, redact_json, secret_spans
from tests.unit._task_kit import options, task_runtime
from tests.unit.test_cli_example import cli, directory_of  # noqa: F401 - the fixture
from tests.unit.test_memory_tasks_preferences import model, preferences, proposing

KEY = "sk-proj-" + secrets.token_hex(12)
"""An OpenAI-shaped key made per run, so finding it on disk can only be a leak."""
SAID = f"Please always write to me in German. My API key is {KEY} for the deploy."


def _everything_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _leaks(folder: Path, secret: str) -> list[str]:
    needle = secret.encode()
    return [str(p) for p in _everything_under(folder) if needle in p.read_bytes()]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"key {KEY} here", "api_key"),
        ("password: hunter2hunter2 ok", "credential"),
        ("card 4111 1111 1111 1111", "card_number"),
        ("mail me at ada@example.com", "email_address"),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.c2lnbmF0dXJlMTIz", "jwt"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----", "private_key"),
    ],
    # ids without the per-run KEY: every xdist worker must collect the same test ids
    ids=["api_key", "credential", "card_number", "email_address", "jwt", "private_key"],
)
def test_redact_replaces_each_shape_and_stays_secret_shaped(text: str, kind: str) -> None:
    [(start, end, found)] = secret_spans(text)
    assert found == kind
    redacted = redact(text)
    assert text[start:end] not in redacted and f"[redacted:{kind}]" in redacted
    assert redact(redacted) == redacted  # idempotent
    assert "redacted" in find_secrets(redacted)  # a decision on it is still "secret"


def test_redact_json_keeps_store_ids_and_redacts_every_string() -> None:
    record_id = secrets.token_hex(16)  # the SQLite store's ids are 32 hex digits
    hex_secret = secrets.token_hex(20)
    value = {"memories": [{"id": record_id}], "message": f"ok (memory {record_id} v1)",
             "notes": [f"token {hex_secret}"], KEY: 1}  # fmt: skip
    redacted = redact_json(value)
    assert redacted["memories"][0]["id"] == record_id
    assert redacted["message"] == f"ok (memory {record_id} v1)"
    assert hex_secret not in json.dumps(redacted) and KEY not in json.dumps(redacted)


def test_the_cli_writes_no_secret_anywhere_and_resumes_from_the_redacted_request(
    cli: Any,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    path = tmp_path / "said.json"
    path.write_text(json.dumps([{"role": "user", "content": SAID}]))
    first = cli("write", "--conversation", str(path), "--checkpoint")
    assert first.exit_code == 0, first.output
    folder = directory_of(first.output)
    request = json.loads((folder / "request.json").read_text())
    assert "[redacted:api_key]" in request["conversation"][0]["content"]
    resumed = cli("write", "--directory", str(folder))
    assert resumed.exit_code == 0, resumed.output
    assert "admission: admitted" in resumed.output
    again = cli("search", "--directory", str(folder))  # request.json moves to requests/
    assert again.exit_code == 0, again.output
    assert (folder / "memory.sqlite").is_file() and (folder / "requests").is_dir()
    assert _leaks(folder, KEY) == []
    assert KEY not in first.output + resumed.output + again.output


def test_a_resume_from_the_redacted_request_decides_as_the_original_did(
    tmp_path: Path,
) -> None:
    """A secret inside the proposed sentence: rejected as ``secret`` on the original and,
    after a crash before the first checkpoint, again on the redacted request."""
    said = f"Always write to me in German, my password is {KEY}."
    for name, text in (("original", said), ("redacted", redact(said))):
        folder = tmp_path / name
        turns = [{"role": "user", "content": text}]
        with model(proposing(text, "de")) as fake, task_runtime(folder, fake) as (rt, _):
            outcome = run_write(
                rt,
                {"request": {"taskId": "w1", "kind": "write", "conversation": turns}},
                options(folder, allow_write=True),
            )
            assert outcome.status == "success", outcome.error
            assert outcome.artifact is not None
            [proposal] = outcome.artifact["admission"]["proposals"]
            assert "secret" in proposal["reasons"] and proposal["quote"] is None
            assert preferences(rt) == []
        assert _leaks(folder, KEY) == []
