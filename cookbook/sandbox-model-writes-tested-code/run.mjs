// A model writes code, a sandbox runs its tests (the TypeScript tab of the recipe, as a plain
// Node 20 ES module: fetch and node:fs only, no npm packages).
//
// One sandbox with no internet (egress deny) and an "infer:run" grant capped at $1 gets
// agent.py, task.md and test_solution.py. We check that it cannot reach example.com, then run
// agent.py: it asks the node's model for solution.py, runs the tests and sends failures back,
// at most three times. The sandbox is deleted at the end, whatever happened, and the outputs
// are printed as one JSON object (progress and the solution kept go to stderr).
//
//   B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... node run.mjs
//
// Exit status 1 when a request failed, agent.py could not run to its report, or the sandbox
// reached the internet; failing tests are a result, not an error.
import { readFileSync } from "node:fs";

const API = process.env.B3OS_API_URL ?? "http://127.0.0.1:7070";
const KEY = process.env.B3OS_API_KEY;
if (!KEY) {
  console.error("set B3OS_API_KEY (e.g. $(cat /var/lib/b3os/admin.key))");
  process.exit(2);
}
const AUTH = { Authorization: `Bearer ${KEY}` };
const HERE = new URL(".", import.meta.url);

// One API request. Returns the parsed body (the text with raw); throws with the API's error on
// an HTTP error.
async function call(method, path, { json, bytes, raw } = {}) {
  const headers = { ...AUTH };
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (bytes !== undefined) {
    headers["Content-Type"] = "application/octet-stream";
    body = bytes;
  }
  const res = await fetch(API + path, { method, headers, body });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = JSON.parse(text);
  } catch {}
  if (!res.ok) {
    const err = parsed?.error ? `${parsed.error.code}: ${parsed.error.message}` : text.slice(0, 300);
    throw new Error(`${method} ${path} answered HTTP ${res.status}: ${err}`);
  }
  return raw ? text : parsed;
}

// The last non-empty line of an exec's stdout, if it is a JSON object.
function lastJson(stdout) {
  const line = stdout.split("\n").filter((l) => l.trim()).pop() ?? "";
  try {
    const v = JSON.parse(line);
    return v && typeof v === "object" && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

let sbx = null;
try {
  // 1. A sandbox without internet, allowed to call the node's model (at most $1 of it).
  const sandbox = await call("POST", "/v1/sandboxes", {
    json: {
      template: "base",
      timeout_s: 300,
      egress: { mode: "deny" },
      api: { scopes: ["infer:run"], spend_cap_usd: 1 },
      metadata: { recipe: "sandbox-model-writes-tested-code" },
    },
  });
  sbx = sandbox.id;
  const createMs = sandbox.timing?.total_ms ?? null;
  console.error(`created ${sbx}`);

  // 2. The agent, the task and the tests.
  for (const f of ["agent.py", "task.md", "test_solution.py"]) {
    await call("PUT", `/v1/sandboxes/${sbx}/files?path=/workspace/${f}`, { bytes: readFileSync(new URL(f, HERE)) });
  }

  // 3. No way out but the model: example.com must not answer.
  const probe = (
    await call("POST", `/v1/sandboxes/${sbx}/exec`, {
      json: { cmd: "curl -s -m 5 -o /dev/null https://example.com && echo reached || echo blocked" },
    })
  ).stdout.trim();
  console.error(`internet: ${probe}`);

  // 4. The agent asks the model, runs the tests, sends failures back (at most 3 attempts).
  const start = performance.now();
  const r = await call("POST", `/v1/sandboxes/${sbx}/exec`, {
    json: { cmd: ["python3", "/workspace/agent.py"], timeout_ms: 58000 },
  });
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

  // 5. The solution the agent kept.
  try {
    const solution = await call("GET", `/v1/sandboxes/${sbx}/files?path=/workspace/solution.py`, { raw: true });
    console.error(`---- solution.py ----\n${solution.trimEnd()}\n---------------------`);
  } catch (e) {
    console.error(`no solution.py (${e.message})`);
  }

  // 6. Delete the sandbox.
  await call("DELETE", `/v1/sandboxes/${sbx}`);
  sbx = null;
  console.error("deleted the sandbox");

  // 7. The outputs. "internet" is "blocked" only if neither curl nor agent.py reached example.com.
  const blocked = probe === "blocked" && report.internet !== "reached";
  const pick = (k) => report[k] ?? null;
  const outputs = {
    model: pick("model"),
    internet: blocked ? "blocked" : "reached",
    attempts: pick("attempts"),
    all_passed: pick("all_passed"),
    tests_total: pick("tests_total"),
    tests_passed: pick("tests_passed"),
    model_ms: pick("model_ms"),
    completion_tokens: pick("completion_tokens"),
    tests_ms: pick("tests_ms"),
    create_ms: createMs,
    exec_ms: execMs,
    solution_lines: pick("solution_lines"),
    solution_head: pick("solution_head"),
    error,
  };
  console.log(JSON.stringify(outputs, null, 2));
  if (error || !blocked) process.exitCode = 1;
} catch (e) {
  console.error(`error: ${e.message}`);
  process.exitCode = 1;
} finally {
  // Whatever happened, leave no sandbox running.
  if (sbx) await fetch(`${API}/v1/sandboxes/${sbx}`, { method: "DELETE", headers: AUTH }).catch(() => {});
}
