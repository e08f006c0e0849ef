// Fork a sandbox and let a model try three fixes (the TypeScript tab of the recipe, as a
// plain Node 20 ES module: fetch and node:fs only, no npm packages).
//
// One forkable sandbox (no network, allowed to call the node's model) gets a buggy slug.py,
// its tests and fix.py. We run the tests once, fork the sandbox into three copies, and in each
// copy fix.py asks the model for a fixed slug.py at its own temperature. All four sandboxes are
// deleted at the end, and the outputs are printed as one JSON object.
//
//   B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... node run.mjs
import { readFileSync } from "node:fs";

const API = process.env.B3OS_API_URL ?? "http://127.0.0.1:7070";
const KEY = process.env.B3OS_API_KEY;
if (!KEY) {
  console.error("set B3OS_API_KEY (e.g. $(cat /var/lib/b3os/admin.key))");
  process.exit(2);
}
const AUTH = { Authorization: `Bearer ${KEY}` };
const HERE = new URL(".", import.meta.url);
const TEMPERATURES = [0, 0.6, 1.0];

// One API request. Returns {body, headers}; throws with the API's error on an HTTP error.
async function call(method, path, { json, bytes } = {}) {
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
  return { body: parsed, headers: res.headers };
}

// The last line of an exec's stdout, if it is a JSON object.
function lastJson(stdout) {
  const line = stdout.trim().split("\n").pop() ?? "";
  try {
    const v = JSON.parse(line);
    return v && typeof v === "object" && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

// The dur= of one Server-Timing phase, in ms ("restore;dur=90.5, total;dur=323.4").
function serverTiming(headers, phase) {
  for (const entry of (headers.get("server-timing") ?? "").split(",")) {
    const [name, ...params] = entry.trim().split(";");
    const dur = params.find((p) => p.trim().startsWith("dur="));
    if (name === phase && dur) return Number(dur.trim().slice(4));
  }
  return null;
}

const ids = [];
try {
  // 1. A forkable sandbox without network, allowed to call the node's model.
  const { body: sandbox } = await call("POST", "/v1/sandboxes", {
    json: {
      template: "base",
      forkable: true,
      timeout_s: 600,
      egress: { mode: "deny", allow: [] },
      api: { scopes: ["infer:run"], spend_cap_usd: 0.25 },
      metadata: { recipe: "sandbox-fork-best-of-n-fixes" },
    },
  });
  const src = sandbox.id;
  ids.push(src);
  console.error(`created ${src}`);

  // 2. The buggy code, its tests and the script that asks the model for a fix.
  for (const f of ["slug.py", "test_slug.py", "fix.py"]) {
    await call("PUT", `/v1/sandboxes/${src}/files?path=/workspace/${f}`, {
      bytes: readFileSync(new URL(f, HERE)),
    });
  }

  // 3. The tests before any fix: 7 tests, 5 failing.
  const { body: run } = await call("POST", `/v1/sandboxes/${src}/exec`, {
    json: { cmd: ["python3", "/workspace/fix.py", "--tests-only"], timeout_ms: 30000 },
  });
  const before = lastJson(run.stdout);
  if (!before) throw new Error(`fix.py --tests-only printed no JSON report: ${run.stderr}`);
  console.error(`before the fix: ${before.tests_total - before.tests_passed} of ${before.tests_total} tests fail`);

  // 4. Three copies of the sandbox, memory and disk included.
  const { body: fork, headers } = await call("POST", `/v1/sandboxes/${src}/fork`, { json: { count: 3 } });
  const forks = fork.data.map((s) => s.id);
  ids.push(...forks);
  const forkMs = serverTiming(headers, "total");
  const restoreMs = serverTiming(headers, "restore");
  console.error(`forked ${forks.join(" ")} in ${forkMs} ms (restore ${restoreMs} ms)`);

  // 5. In each fork, the model tries a fix at its own temperature (all three at once).
  const tries = await Promise.all(
    forks.map(async (id, i) => {
      const temperature = TEMPERATURES[i];
      let error;
      try {
        const { body: r } = await call("POST", `/v1/sandboxes/${id}/exec`, {
          json: {
            cmd: ["python3", "/workspace/fix.py"],
            env: { TEMPERATURE: String(temperature) },
            timeout_ms: 58000,
          },
        });
        const report = lastJson(r.stdout);
        if (r.exit_code === 0 && report) {
          const { passed, tests_passed, rounds, model_ms, tests_ms, lines, failing } = report;
          console.error(`temperature ${temperature}: ${passed ? "passed" : "failed"} ` +
            `(${tests_passed} of ${before.tests_total} tests, ${rounds} round(s))`);
          return { temperature, passed, tests_passed, rounds, model_ms, tests_ms, lines, failing, error: null };
        }
        error = r.timed_out ? "fix.py timed out" : `fix.py exited ${r.exit_code}: ${r.stderr.trim()}`;
      } catch (e) {
        error = `exec failed: ${e.message}`;
      }
      console.error(`temperature ${temperature}: ${error}`);
      return {
        temperature, passed: false, tests_passed: null, rounds: null, model_ms: null,
        tests_ms: null, lines: null, failing: null, error,
      };
    }),
  );

  // 6. Delete all four sandboxes.
  while (ids.length) {
    await call("DELETE", `/v1/sandboxes/${ids[0]}`);
    ids.shift();
  }
  console.error("deleted all 4 sandboxes");

  // 7. The outputs.
  const winners = tries.filter((t) => t.passed).map((t) => t.temperature);
  const outputs = {
    tests_total: before.tests_total,
    failing_before: before.tests_total - before.tests_passed,
    forks: forks.length,
    fork_ms: forkMs,
    fork_restore_ms: restoreMs,
    passing: winners.length,
    winner_temperature: winners.length ? Math.min(...winners) : null,
    tries,
  };
  console.log(JSON.stringify(outputs, null, 2));
  // Exit 1 when a try could not run (e.g. the model was unreachable); failed tests are a result.
  if (tries.some((t) => t.error)) process.exitCode = 1;
} catch (e) {
  console.error(`error: ${e.message}`);
  process.exitCode = 1;
} finally {
  // Whatever happened, leave no sandbox running.
  await Promise.all(ids.map((id) => fetch(`${API}/v1/sandboxes/${id}`, { method: "DELETE", headers: AUTH }).catch(() => {})));
}
