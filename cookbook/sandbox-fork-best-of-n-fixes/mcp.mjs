// Fork a sandbox and let a model try three fixes: the MCP tab. A scripted MCP client (no model
// deciding: it makes exactly the tool calls the recipe lists) on b3osd's MCP server, with the
// official TypeScript SDK (npm ci in cookbook/, then node this file).
//
// sandbox_create takes neither forkable nor an api grant, so the source sandbox is created
// with the REST API and the same key, as the recipe says. Then, over MCP at
// /mcp?toolsets=sandboxes: sandbox_write_file three times, sandbox_exec (the tests alone),
// sandbox_fork into three, sandbox_exec once per fork with its TEMPERATURE and a 58 s timeout,
// sandbox_delete four times. The outputs are those of the other tabs (run.mjs), the fork's
// phases read from the tool result's timing.
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
const TEMPERATURES = [0, 0.6, 1.0];

function lastJson(stdout) {
  const line = stdout.trim().split("\n").pop() ?? "";
  try {
    const v = JSON.parse(line);
    return v && typeof v === "object" && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

// One tool call; a result marked isError throws with the tool's text (code: message).
async function tool(client, name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
  if (r.isError && !r.structuredContent) throw new Error(`${name}: ${r.content.map((c) => c.text).join("")}`);
  return r.structuredContent;
}

const ids = [];
const client = new Client({ name: "b3os-cookbook-fork", version: "1.0.0" });
try {
  // The source, with the REST API: forkable, no network, a $0.25 model grant.
  const res = await fetch(`${API}/v1/sandboxes`, {
    method: "POST",
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: JSON.stringify({
      template: "base", forkable: true, timeout_s: 600, egress: { mode: "deny" },
      api: { scopes: ["infer:run"], spend_cap_usd: 0.25 }, metadata: { recipe: "sandbox-fork-best-of-n-fixes" },
    }),
  });
  const created = await res.json();
  if (!res.ok) throw new Error(`create answered HTTP ${res.status}: ${JSON.stringify(created.error)}`);
  const src = created.id;
  ids.push(src);
  console.error(`created ${src}`);

  await client.connect(new StreamableHTTPClientTransport(new URL(`${API}/mcp?toolsets=sandboxes`), {
    requestInit: { headers: { Authorization: `Bearer ${KEY}` } },
  }));
  for (const f of ["slug.py", "test_slug.py", "fix.py"])
    await tool(client, "sandbox_write_file", { sandbox_id: src, path: `/workspace/${f}`, content: readFileSync(new URL(f, HERE), "utf8") });

  const run = await tool(client, "sandbox_exec", { sandbox_id: src, cmd: "python3 /workspace/fix.py --tests-only", timeout_ms: 30000 });
  const before = lastJson(run.stdout);
  if (!before) throw new Error(`fix.py --tests-only printed no JSON report: ${run.stderr}`);
  console.error(`before the fix: ${before.tests_total - before.tests_passed} of ${before.tests_total} tests fail`);

  const fork = await tool(client, "sandbox_fork", { sandbox_id: src, count: 3 });
  const forks = fork.data.map((s) => s.id);
  ids.push(...forks);
  console.error(`forked ${forks.join(" ")} in ${fork.timing?.total_ms} ms (restore ${fork.timing?.restore_ms} ms)`);

  const tries = await Promise.all(forks.map(async (id, i) => {
    const temperature = TEMPERATURES[i];
    let error;
    try {
      const r = await tool(client, "sandbox_exec", {
        sandbox_id: id, cmd: "python3 /workspace/fix.py", env: { TEMPERATURE: String(temperature) }, timeout_ms: 58000,
      });
      const report = lastJson(r.stdout);
      if (r.exit_code === 0 && report) {
        const { passed, tests_passed, rounds, model_ms, tests_ms, lines, failing } = report;
        console.error(`temperature ${temperature}: ${passed ? "passed" : "failed"} (${tests_passed} of ${before.tests_total} tests)`);
        return { temperature, passed, tests_passed, rounds, model_ms, tests_ms, lines, failing, error: null };
      }
      error = r.timed_out ? "fix.py timed out" : `fix.py exited ${r.exit_code}: ${r.stderr.trim()}`;
    } catch (e) {
      error = `sandbox_exec failed: ${e.message}`;
    }
    console.error(`temperature ${temperature}: ${error}`);
    return { temperature, passed: false, tests_passed: null, rounds: null, model_ms: null, tests_ms: null, lines: null, failing: null, error };
  }));

  while (ids.length) {
    await tool(client, "sandbox_delete", { sandbox_id: ids[0] });
    ids.shift();
  }
  console.error("deleted all 4 sandboxes");

  const winners = tries.filter((t) => t.passed).map((t) => t.temperature);
  console.log(JSON.stringify({
    tests_total: before.tests_total,
    failing_before: before.tests_total - before.tests_passed,
    forks: forks.length,
    fork_ms: fork.timing?.total_ms ?? null,
    fork_restore_ms: fork.timing?.restore_ms ?? null,
    passing: winners.length,
    winner_temperature: winners.length ? Math.min(...winners) : null,
    tries,
  }, null, 2));
  if (tries.some((t) => t.error)) process.exitCode = 1;
} catch (e) {
  console.error(`error: ${e.message}`);
  process.exitCode = 1;
} finally {
  await Promise.all(ids.map((id) => fetch(`${API}/v1/sandboxes/${id}`, { method: "DELETE", headers: { Authorization: `Bearer ${KEY}` } }).catch(() => {})));
  await client.close().catch(() => {});
}
