"""The TypeScript client (clients/typescript) against a real ``ditto-worker serve``, run
by Node's own test runner (issue 26 item 6), on the embedded runtime and on a real fleet:
every MEMORY node, a 401, invalid input, an aborted call cancelled on the server, a
deadline. Its types are generated from the
gateway's OpenAPI document by openapi-typescript; the committed document and types are
checked to be in step with the code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_gateway_http import T1, T2, _fleet_db, serving

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "clients" / "typescript"


def _npm(*args: str) -> subprocess.CompletedProcess[str]:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed (Node.js 20+): apt-get install nodejs npm")
    return subprocess.run([npm, *args], cwd=CLIENT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built() -> Path:
    """``npm ci`` (the lock file's exact versions) and ``npm run build``."""
    for step in (["ci", "--no-audit", "--no-fund"], ["run", "build"], ["run", "typecheck"]):
        out = _npm(*step)
        assert out.returncode == 0, (
            f"npm {' '.join(step)}:\n{out.stdout[-3000:]}{out.stderr[-3000:]}"
        )
    return CLIENT


def test_the_committed_openapi_document_and_types_are_in_step(built: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "openapi.json"
    subprocess.run([sys.executable, str(REPO / "scripts" / "openapi.py"), str(fresh)], check=True)
    assert json.loads(fresh.read_text()) == json.loads((CLIENT / "openapi.json").read_text()), (
        "run: python scripts/openapi.py clients/typescript/openapi.json && "
        "(cd clients/typescript && npm run generate)"
    )
    types = tmp_path / "schema.ts"
    out = subprocess.run(
        [str(CLIENT / "node_modules" / ".bin" / "openapi-typescript"), str(fresh),
         "--default-non-nullable", "false", "-o", str(types)],
        capture_output=True, text=True, cwd=CLIENT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert types.read_text() == (CLIENT / "src" / "schema.ts").read_text(), "npm run generate"


@pytest.mark.parametrize("kind", ["embedded", "fleet"])
def test_the_node_client_against_a_real_server(
    built: Path, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    redis_url = _fleet_db(request) if kind == "fleet" else None
    with serving(tmp_path, redis_url) as server:
        node = shutil.which("node")
        assert node is not None
        out = subprocess.run(
            [node, "--test", "test/"],
            cwd=CLIENT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "DITTO_GATEWAY_URL": server.url, "DITTO_GATEWAY_TOKEN": T1,
                 "DITTO_GATEWAY_OTHER_TOKEN": T2,
                 "ECHO_SLEEP_LOG": str(tmp_path / "sleeps.jsonl")},
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:] + server.log()
    assert "# pass 6" in out.stdout and "# fail 0" in out.stdout, out.stdout[-2000:]
