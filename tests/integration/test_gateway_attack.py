"""The attack soak's short form (issue 37 item 3): ``bench/gateway_attack.py --short``.

While one token runs 2 x maxInFlight slow bodies, 64 slowloris connections, 1-50 MB
header bombs, deeply nested JSON and disconnect floods at once, not one of the normal
tenants' open-loop calls fails, the server's RSS stays within 100 MB of its quiet peak,
and it logs no traceback. Latency is the bench's to report (docs/benchmarks.md), not
asserted here: a busy machine would make any timing flaky.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gateway_attack.py"


@pytest.mark.timeout(900)
def test_no_normal_call_fails_under_attack_and_memory_stays_bounded() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--short", "--json"],
                         capture_output=True, text=True, timeout=800)  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    quiet, attack = report["quiet"], report["attack"]
    assert quiet["failures"] == 0 and attack["failures"] == 0, attack["failureSamples"]
    assert attack["calls"] == quiet["calls"] > 0
    assert attack["rssMb"] <= quiet["rssMb"] + 100, report
    opened = report["attackConnections"]
    assert opened["slow_body"] >= 2 * report["maxInFlight"] and opened["slowloris"] >= 64
    assert opened["bomb"] >= 1 and opened["deep_json"] >= 1 and opened["disconnect"] >= 1
    assert report["tracebacks"] == 0
