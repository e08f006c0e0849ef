// A model writes code, a sandbox runs its tests: the MCP tab. A scripted MCP client (no model
// deciding: it makes exactly the tool calls the recipe lists) on b3osd's MCP server, with the
// official TypeScript SDK (npm ci in cookbook/, then node this file).
//
// sandbox_create takes no api grant, so the sandbox is created with the REST API and the same
// key, as the recipe says. Then, over MCP at /mcp?toolsets=sandboxes: sandbox_write_file three
// times, sandbox_exec twice (example.com must be out of reach; agent.py with a 58 s timeout),
// sandbox_read_file (solution.py), sandbox_delete. The outputs are those of run.mjs.
//
//   B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... node mcp.mjs
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const API = process.env.B3OS_API_URL ?? "http://127.0.0.1:7070";
const KEY = process.env.B3OS_API_KEY;
if (!KEY) {
  console.error("set B3OS_API_KEY (e.g. $(cat /var/lib/b3os/admin.key))");
  process.exit(2);
}
const HERE = new URL(".", import.meta.url);

function lastJson(stdout) {
  const line = stdout.split("\n").filter((l) => l.trim()).pop() ?? "";
  try {
    const v = JSON.parse(line);
    return v && typeof v === "object" && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

async function tool(client, name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
  if (r.isError && !r.structuredContent) throw new Error(`${name}: ${r.content.map((c) => c.text).join("")}`);
  return r.structuredContent;
}

let sbx = null;
const client = new Client({ name: "b3os-cookbook-code", version: "1.0.0" });
try {
  const res = await fetch(`${API}/v1/sandboxes`, {
    method: "POST",
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify({
      template: "base", timeout_s: 300, egress: { mode: "deny" }, api: { scopes: ["infer:run"], spend_cap_usd: 1 },
      metadata: { recipe: "sandbox-model-writes-tested-code" },
    }),
  });
  const sandbox = await res.json();
  if (!res.ok) throw new Error(`create answered HTTP ${res.status}: ${JSON.stringify(sandbox.error)}`);
  sbx = sandbox.id;
  const createMs = sandbox.timing?.total_ms ?? null;
  console.error(`created ${sbx}`);

  await client.connect(new StreamableHTTPClientTransport(new URL(`${API}/mcp?toolsets=sandboxes`), {
    requestInit: { headers: { Authorization: `Bearer ${KEY}` } },
  }));
  for (const f of ["agent.py", "task.md", "test_solution.py"])
    await tool(client, "sandbox_write_file", { sandbox_id: sbx, path: `/workspace/${f}`, content: readFileSync(new URL(f, HERE), "utf8") });

  const probe = (await tool(client, "sandbox_exec", {
    sandbox_id: sbx, cmd: "curl -s -m 5 -o /dev/null https://example.com && echo reached || echo blocked",
  })).stdout.trim();
  console.error(`internet: ${probe}`);

  const start = performance.now();
  const r = await tool(client, "sandbox_exec", { sandbox_id: sbx, cmd: ["python3", "/workspace/agent.py"], timeout_ms: 58000 });
  const execMs = Math.round((performance.now() - start) * 10) / 10;
  let report = lastJson(r.stdout);
  let error = null;
  if (r.exit_code !== 0 || !report) {
    error = r.timed_out ? "agent.py timed out" : `agent.py exited ${r.exit_code}: ${r.stderr.trim()}`;
    report = {};
    console.error(`error: ${error}`);
  } else {
    console.error(`${report.tests_passed} of ${report.tests_total} tests pass after ${report.attempts} attempt(s)`);
  }

  try {
    const solution = await tool(client, "sandbox_read_file", { sandbox_id: sbx, path: "/workspace/solution.py" });
    console.error(`---- solution.py ----\n${solution.content.trimEnd()}\n---------------------`);
  } catch (e) {
    console.error(`no solution.py (${e.message})`);
  }

  await tool(client, "sandbox_delete", { sandbox_id: sbx });
  sbx = null;
  console.error("deleted the sandbox");

  const blocked = probe === "blocked" && report.internet !== "reached";
  const pick = (k) => report[k] ?? null;
  console.log(JSON.stringify({
    model: pick("model"), internet: blocked ? "blocked" : "reached", attempts: pick("attempts"),
    all_passed: pick("all_passed"), tests_total: pick("tests_total"), tests_passed: pick("tests_passed"),
    model_ms: pick("model_ms"), completion_tokens: pick("completion_tokens"), tests_ms: pick("tests_ms"),
    create_ms: createMs, exec_ms: execMs, solution_lines: pick("solution_lines"), solution_head: pick("solution_head"), error,
  }, null, 2));
  if (error || !blocked) process.exitCode = 1;
} catch (e) {
  console.error(`error: ${e.message}`);
  process.exitCode = 1;
} finally {
  if (sbx) await fetch(`${API}/v1/sandboxes/${sbx}`, { method: "DELETE", headers: { Authorization: `Bearer ${KEY}` } }).catch(() => {});
  await client.close().catch(() => {});
}
