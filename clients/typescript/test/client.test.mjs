// The TypeScript client against a real `ditto-worker serve` (started by
// tests/integration/test_gateway_node.py, which sets the environment below).
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { DittoClient } from "../dist/index.js";

const baseUrl = process.env.DITTO_GATEWAY_URL;
const token = process.env.DITTO_GATEWAY_TOKEN;
const other = process.env.DITTO_GATEWAY_OTHER_TOKEN;
const sleepLog = process.env.ECHO_SLEEP_LOG;
assert.ok(baseUrl && token && other && sleepLog, "run through test_gateway_node.py");

const client = new DittoClient({ baseUrl, token });

test("write, then search finds it; another token does not", async () => {
  const written = await client.call("MEMORY.WRITE", {
    memories: [{ key: "lang", content: "Please answer in German", metadata: { kind: "preference" } }],
  });
  assert.equal(written.status, "success", JSON.stringify(written));
  const [item] = written.output ?? [];
  assert.equal(item?.key, "lang");
  const found = await client.call("MEMORY.SEARCH", { query: "German", strategy: "keyword" });
  assert.equal(found.status, "success");
  assert.equal(found.output?.[0]?.memory.id, item?.id);
  const stranger = new DittoClient({ baseUrl, token: other });
  const none = await stranger.call("MEMORY.SEARCH", { query: "German", strategy: "keyword" });
  assert.deepEqual(none.output, []);
});

test("a call without a valid token is 401 with a NodeResult", async () => {
  const intruder = new DittoClient({ baseUrl, token: "not-a-token" });
  const answer = await intruder.send("MEMORY.GET", { keys: ["lang"] });
  assert.equal(answer.httpStatus, 401);
  assert.equal(answer.result.status, "failed");
  assert.equal(answer.result.error?.code, "UNAUTHENTICATED");
});

test("invalid input is 422 naming the field", async () => {
  const answer = await client.send("MEMORY.QUERY", { limit: "ten" });
  assert.equal(answer.httpStatus, 422);
  assert.equal(answer.result.error?.code, "INVALID_INPUT");
  assert.match(answer.result.error?.message ?? "", /limit/);
});

test("aborting a call cancels it on the server", async () => {
  const controller = new AbortController();
  const pending = client.send("ECHO.SLEEP", { seconds: 30 }, { signal: controller.signal });
  await sleep(1500);
  controller.abort();
  await assert.rejects(pending, { name: "AbortError" });
  const deadline = Date.now() + 20_000;
  let seen = [];
  while (Date.now() < deadline) {
    const lines = existsSync(sleepLog) ? readFileSync(sleepLog, "utf8").trim().split("\n") : [];
    seen = lines.filter(Boolean).map((line) => JSON.parse(line)).filter((f) => f.cancelled);
    if (seen.length > 0) break;
    await sleep(200);
  }
  assert.equal(seen.length, 1, "the handler saw the cancel");
  assert.ok(seen[0].ended - seen[0].started < 15);
});

test("the deadline header ends a long call as a timeout (504)", async () => {
  const answer = await client.send("ECHO.SLEEP", { seconds: 10 }, { timeoutS: 0.5 });
  assert.equal(answer.httpStatus, 504);
  assert.equal(answer.result.status, "timeout");
});

test("every MEMORY node", async () => {
  const written = await client.call("MEMORY.WRITE", {
    memories: [
      { key: "n-a", content: "alpha note" },
      { key: "n-b", content: "beta note" },
    ],
  });
  assert.equal(written.status, "success", JSON.stringify(written));
  const ids = Object.fromEntries((written.output ?? []).map((m) => [m.key, m.id]));
  const got = await client.call("MEMORY.GET", { keys: ["n-a"] });
  assert.equal(got.output?.[0]?.content, "alpha note");
  const page = await client.call("MEMORY.QUERY", {
    filter: { key: { $in: ["n-a", "n-b"] } },
    orderBy: [{ field: "key" }],
    limit: 1,
  });
  assert.equal(page.status, "success", JSON.stringify(page));
  assert.deepEqual(page.output?.items.map((m) => m.key), ["n-a"]);
  const next = await client.call("MEMORY.QUERY", {
    filter: { key: { $in: ["n-a", "n-b"] } },
    orderBy: [{ field: "key" }],
    limit: 1,
    cursor: page.output?.nextCursor,
  });
  assert.deepEqual(next.output?.items.map((m) => m.key), ["n-b"]);
  const updated = await client.call("MEMORY.UPDATE", { memories: [{ id: ids["n-a"], content: "alpha, revised" }] });
  assert.equal(updated.output?.[0]?.content, "alpha, revised");
  const deleted = await client.call("MEMORY.DELETE", { ids: [ids["n-b"]] });
  assert.deepEqual(deleted.output?.deleted, [ids["n-b"]]);
});
