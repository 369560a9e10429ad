// One measurement of bench/gateway.py's "node" path: MEMORY.GET through the TypeScript
// client (clients/typescript, built to dist/) from Node.js, whose global fetch keeps its
// connections alive. `callers` concurrent callers make `calls` calls in all (after a
// warm-up that opens every caller's connection); prints one JSON line:
// {"latencies": [ms, ...], "seconds": wall, "cpuMs": this process's CPU while timed,
//  "warmupCalls": calls made before timing}.
//
//   node bench/gateway_node.mjs <baseUrl> <token> <calls> <callers>
import { DittoClient } from "../clients/typescript/dist/index.js";

const [baseUrl, token, callsArg, callersArg] = process.argv.slice(2);
const calls = Number(callsArg);
const callers = Number(callersArg);
const client = new DittoClient({ baseUrl, token });

async function one() {
  const result = await client.call("MEMORY.GET", { keys: ["k"] });
  if (result.status !== "success" || !result.output?.length) {
    throw new Error(`MEMORY.GET did not succeed: ${JSON.stringify(result).slice(0, 300)}`);
  }
}

const warmups = 5;
for (let i = 0; i < warmups; i++) await Promise.all(Array.from({ length: callers }, one));
const latencies = [];
const per = Math.max(1, Math.floor(calls / callers));
const cpu = process.cpuUsage();
const started = performance.now();
await Promise.all(
  Array.from({ length: callers }, async () => {
    for (let i = 0; i < per; i++) {
      const t = performance.now();
      await one();
      latencies.push(performance.now() - t);
    }
  }),
);
const seconds = (performance.now() - started) / 1000;
const used = process.cpuUsage(cpu);
const cpuMs = (used.user + used.system) / 1000;
console.log(JSON.stringify({ latencies, seconds, cpuMs, warmupCalls: warmups * callers }));
