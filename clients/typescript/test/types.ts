// Compiled (not run) by `npm run typecheck`: the generated types check inputs and outputs.
import { DittoClient, type NodeInput, type NodeResult } from "../src/index.js";

const client = new DittoClient({ baseUrl: "http://127.0.0.1:8080", token: "t" });

export async function typed(): Promise<unknown> {
  const input: NodeInput<"MEMORY.QUERY"> = { limit: 10, orderBy: [{ field: "key" }] };
  const page: NodeResult<"MEMORY.QUERY"> = await client.call("MEMORY.QUERY", input);
  // @ts-expect-error: limit is a number, not a string
  await client.call("MEMORY.QUERY", { limit: "ten" });
  // @ts-expect-error: not a built-in node id
  await client.call("MEMORY.GTE", {});
  return page.output?.items[0]?.content;
}
