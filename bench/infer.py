"""INFER.GENERATE on the local model: what our handler costs over the model server alone.

Runs >= 30 preference-extraction prompts (a user message stating a language and a style;
the reply is JSON of :data:`SCHEMA` with an exact quote) at temperature 0 through each
*path* and prints, per path: calls, JSON-valid rate (the reply parses and matches the
schema; ``INFER_INVALID_OUTPUT`` counts as invalid), how many were cut at ``maxTokens``,
language-correct and quote-verbatim rates (how good the 0.5B model is at the task, not a
property of our code), p50 / p95 latency per call, completion tokens/s end to end (summed
completion tokens / summed call time, prompt evaluation included), and the ratio of each
path's p50 and total time to the ``direct`` path's. Also: the server's start time, its RSS
after the run, and its own decode speed (llama.cpp's ``timings.predicted_per_second``,
median over direct calls).

Paths (:data:`PATHS`; each a ``(prompt) -> Call`` function):

* ``direct``  — the model server called directly with httpx (the same streamed request
  body the handler sends, minimal SSE parsing, the same jsonschema check);
* ``handler`` — ``create_infer_worker(...)``'s INFER.GENERATE handler called in-process
  with a ``NodeContext`` (validation, the streamed client, the abort timer, the check);
* ``fleet``   — the same call through the fleet: ``DittoClient.invoke`` -> Redis (a
  throwaway ``redis-server``) -> a real worker process (``python -m ditto_worker worker
  --nodes infer``: its own pool, threads, concurrency 1; pointed at the same model server
  by ``DITTO_WORKER_INFER_BASE_URL``) -> the handler -> the model server -> the result
  back through Redis.

Paths run in blocks over all prompts, in the order A B C … C B A for ``--rounds 2`` (each
path sees the same prompt-cache state; the server has one slot and keeps only the last
prompt).

    python bench/infer.py                        # starts the local model (all cores)
    python bench/infer.py --prompts 32 --rounds 2 --threads 2
    python bench/infer.py --paths direct,handler          # without Redis and a worker
    python bench/infer.py --base-url http://127.0.0.1:18080/v1 --model NAME   # a running server
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ditto_worker.errors import ErrorCode, NodeError  # noqa: E402
from ditto_worker.infer import INFER_GENERATE, LocalModelSettings, create_infer_worker  # noqa: E402
from ditto_worker.runtime import NodeContext  # noqa: E402

LANGUAGES = ["English", "German", "French", "Chinese", "Spanish", "Japanese"]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "language": {"type": "string", "enum": LANGUAGES},
        "style": {"type": "string", "enum": ["brief", "detailed"]},
        "quote": {"type": "string", "maxLength": 120},
    },
    "required": ["language", "style", "quote"],
    "additionalProperties": False,
}
SYSTEM = (
    "Extract the user's communication preference. Answer with JSON only: language, style "
    "(brief or detailed), and quote: the user's own words that state the preference, "
    "copied exactly from the message."
)
PHRASINGS = [
    "Please answer me in {lang} from now on, and keep it {style}.",
    "I'd like all your replies in {lang}; {style} answers work best for me.",
    "Could you write to me in {lang}? I prefer {style} explanations.",
    "From today, use {lang} with me. Make your messages {style}.",
    "My team reads {lang} only, so reply in {lang}, and be {style}.",
    "Keep the progress updates {style} and in {lang}, please.",
]
STYLE_WORDS = {"brief": "short", "detailed": "detailed"}
MAX_TOKENS = 160  # the longest valid reply (a 120-character quote) fits
VALIDATOR = Draft202012Validator(SCHEMA)


@dataclass(frozen=True)
class Prompt:
    message: str
    language: str
    style: str


@dataclass
class Call:
    """One call's outcome: latency (s), tokens (None: the endpoint reported no usage), and
    the parsed reply (None: invalid)."""

    latency_s: float
    completion_tokens: int | None
    reply: Any
    decode_tok_s: float | None = None
    cut: bool = False  # finishReason length (INFER_INVALID_OUTPUT "cut off")


def prompts(n: int) -> list[Prompt]:
    """``n`` (at most 72) distinct prompts: phrasings x languages x styles, seeded order."""
    combos = list(itertools.product(PHRASINGS, LANGUAGES, ["brief", "detailed"]))
    random.Random(7).shuffle(combos)
    return [
        Prompt(phrasing.format(lang=lang, style=STYLE_WORDS[style]), lang, style)
        for phrasing, lang, style in combos[:n]
    ]


def messages(p: Prompt) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p.message}]


def valid(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if not list(VALIDATOR.iter_errors(value)) else None


def direct_path(base_url: str, model: str) -> Callable[[Prompt], Call]:
    client = httpx.Client(  # one connection per call, as the handler
        base_url=base_url.rstrip("/") + "/",
        timeout=300,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )

    def run(p: Prompt) -> Call:
        body = {
            "messages": messages(p),
            "model": model,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": SCHEMA, "strict": True},
            },
        }
        started = time.perf_counter()
        parts, finish, tokens, speed = [], "", None, None
        with client.stream("POST", "chat/completions", json=body) as response:
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or ():
                    parts.append((choice.get("delta") or {}).get("content") or "")
                    finish = choice.get("finish_reason") or finish
                if chunk.get("usage"):
                    tokens = chunk["usage"].get("completion_tokens")
                if chunk.get("timings"):
                    speed = chunk["timings"].get("predicted_per_second")
        latency = time.perf_counter() - started
        reply = valid("".join(parts)) if finish == "stop" else None
        return Call(latency, tokens, reply, speed, cut=finish == "length")

    return run


def handler_path(base_url: str, model: str) -> Callable[[Prompt], Call]:
    definition = create_infer_worker(
        {"baseUrl": base_url, "model": model, "maxTokens": MAX_TOKENS},
        env={},
        dotenv_path=None,
    )
    handler = definition.nodes[INFER_GENERATE].handler

    def run(p: Prompt) -> Call:
        started = time.perf_counter()
        try:
            out = handler(
                {"messages": messages(p), "responseSchema": SCHEMA, "temperature": 0},
                NodeContext("bench"),
            )
        except NodeError as exc:
            if exc.code != ErrorCode.INFER_INVALID_OUTPUT:
                raise
            cut = "cut off" in exc.safe_message
            return Call(time.perf_counter() - started, MAX_TOKENS if cut else None, None, cut=cut)
        used = out["usage"]  # None: the endpoint reported no usage
        return Call(
            time.perf_counter() - started, used and used["completionTokens"], out.get("json")
        )

    return run


def fleet_path(base_url: str, model: str) -> Callable[[Prompt], Call]:
    from ditto_worker.config import FleetSettings
    from ditto_worker.fleet import DittoClient
    from ditto_worker.testing.servers import RedisServer, log_tail, stop_process

    redis_server = RedisServer().start()
    env = dict(os.environ)
    env.update(
        DITTO_BROKER_URL=redis_server.url + "/0",
        DITTO_WORKER_INFER_BASE_URL=base_url,
        DITTO_WORKER_INFER_MODEL=model,
    )
    log = tempfile.NamedTemporaryFile(prefix="bench-infer-worker-", suffix=".log", delete=False)
    print(f"  fleet worker log: {log.name}", file=sys.stderr)
    worker = subprocess.Popen(
        [sys.executable, "-m", "ditto_worker", "worker", "--nodes", "infer",
         "--loglevel", "WARNING", "--hostname", f"bench-infer-{os.getpid()}@localhost"],
        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    client = DittoClient.from_fleet(FleetSettings(broker_url=redis_server.url + "/0"))
    CLEANUP.append(
        lambda: (client.close(), stop_process(worker), redis_server.close(), log.close())
    )
    bad = client.invoke(INFER_GENERATE, {"messages": []}, timeout=120)  # waits for the worker
    if bad.error is None or bad.error.code != ErrorCode.INVALID_INPUT:
        raise SystemExit(f"the infer worker did not answer: {bad.error}\n{log_tail(log.name)}")

    def run(p: Prompt) -> Call:
        started = time.perf_counter()
        result = client.invoke(
            INFER_GENERATE,
            {"messages": messages(p), "responseSchema": SCHEMA, "temperature": 0,
             "maxTokens": MAX_TOKENS},
            timeout=300,
        )  # fmt: skip
        latency = time.perf_counter() - started
        if result.status == "success":
            out = result.output
            tokens = None if out.usage is None else out.usage.completion_tokens
            return Call(latency, tokens, out.json_)
        assert result.error is not None, result
        if result.error.code != ErrorCode.INFER_INVALID_OUTPUT:
            raise SystemExit(f"fleet call failed: {result.error.code} {result.error.message}")
        cut = "cut off" in result.error.message
        return Call(latency, MAX_TOKENS if cut else None, None, cut=cut)

    return run


CLEANUP: list[Callable[[], Any]] = []
"""What the paths started (a worker process, a Redis), stopped at the end."""

PATHS: dict[str, Callable[[str, str], Callable[[Prompt], Call]]] = {
    "direct": direct_path,
    "handler": handler_path,
    "fleet": fleet_path,
}
"""Path name -> ``(base_url, model) -> (prompt -> Call)``."""


def summarize(calls: list[tuple[Prompt, Call]]) -> dict[str, float | None]:
    latencies = sorted(c.latency_s * 1000 for _, c in calls)
    total_s = sum(c.latency_s for _, c in calls)
    ok = [(p, c) for p, c in calls if c.reply is not None]
    return {
        "calls": len(calls),
        "json_valid": len(ok) / len(calls),
        "cut": sum(c.cut for _, c in calls),
        "language_ok": sum(c.reply["language"] == p.language for p, c in ok) / len(calls),
        "quote_verbatim": sum(c.reply["quote"] in p.message for p, c in ok) / len(calls),
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[round(0.95 * (len(latencies) - 1))],
        "total_s": total_s,
        "tok_s": _tokens_per_s([c for _, c in calls]),
    }


def _tokens_per_s(calls: list[Call]) -> float | None:
    """Completion tokens / call time over the calls whose tokens are known (``None``: no
    call reported usage — unknown, not 0 tok/s)."""
    known = [c for c in calls if c.completion_tokens is not None]
    seconds = sum(c.latency_s for c in known)
    return sum(c.completion_tokens or 0 for c in known) / seconds if known and seconds else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32, help="at least 30")
    parser.add_argument("--rounds", type=int, default=2, help="blocks per path (A B B A …)")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated")
    parser.add_argument("--threads", type=int, default=0, help="local server; 0 = all cores")
    parser.add_argument("--base-url", default="", help="a running server (skip the local one)")
    parser.add_argument("--model", default="")
    args = parser.parse_args()
    names = args.paths.split(",")
    # SIGTERM ends the run through the cleanup below (the worker, Redis, the local model)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = None
    base_url, model, start_s = args.base_url, args.model, None
    if not base_url:
        from ditto_worker.infer.local import LocalModelServer

        t0 = time.perf_counter()
        server = LocalModelServer.start(LocalModelSettings(threads=args.threads))
        start_s = time.perf_counter() - t0
        base_url, model = server.base_url, server.model
    try:
        runners = {name: PATHS[name](base_url, model) for name in names}
        batch = prompts(args.prompts)
        runners[names[0]](batch[-1])  # warm-up: first-call allocations, the system prompt
        results: dict[str, list[tuple[Prompt, Call]]] = {name: [] for name in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else list(reversed(names)):
                results[name] += [(p, runners[name](p)) for p in batch]
                print(f"  round {r + 1}: {name} done", file=sys.stderr, flush=True)
        rss = server.rss_bytes() if server is not None else 0
    finally:
        for cleanup in reversed(CLEANUP):
            cleanup()
        if server is not None:
            server.stop()
    report(results, names, start_s, rss, len(batch), args)


def report(
    results: dict[str, list[tuple[Prompt, Call]]],
    names: list[str],
    start_s: float | None,
    rss: int,
    n_prompts: int,
    args: argparse.Namespace,
) -> None:
    stats = {name: summarize(results[name]) for name in names}
    base = stats[names[0]]
    print(
        f"INFER.GENERATE, {n_prompts} preference-extraction prompts x {args.rounds} rounds, "
        f"temperature 0, maxTokens {MAX_TOKENS}, json_schema response format"
    )
    header = (
        "path      calls  json-valid  cut  language  quote  p50 ms  p95 ms  tok/s  p50 x  total x"
    )
    print(header)
    for name in names:
        s = stats[name]
        print(
            f"{name:<9} {s['calls']:>5}  {s['json_valid']:>10.0%}  {s['cut']:>3}  "
            f"{s['language_ok']:>8.0%}  "
            f"{s['quote_verbatim']:>5.0%}  {s['p50_ms']:>6.0f}  {s['p95_ms']:>6.0f}  "
            f"{_figure(s['tok_s']):>5}  {s['p50_ms'] / base['p50_ms']:>5.3f}  "
            f"{s['total_s'] / base['total_s']:>7.3f}"
        )
    speeds = [c.decode_tok_s for _, c in results.get("direct", []) if c.decode_tok_s]
    if speeds:
        print(f"server decode speed (llama.cpp timings, median): {statistics.median(speeds):.1f}")
    if start_s is not None:
        print(
            f"local server: started in {start_s:.1f} s (sha256 check included), "
            f"RSS {rss / 2**20:.0f} MiB"
        )
    same = sum(
        a.reply == b.reply
        for (_, a), (_, b) in zip(results[names[0]], results[names[-1]], strict=False)
    )
    print(f"identical replies {names[0]} vs {names[-1]}: {same}/{len(results[names[0]])}")
    print(json.dumps({"stats": stats, "start_s": start_s, "rss_bytes": rss}))


def _figure(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    main()
