// A terminal client for the e2e suite on the `ws` package (an independent WebSocket
// implementation: b3osd's side is Beast's). It opens GET /v1/sandboxes/{id}/pty and plays a
// script of steps, printing one JSON line per step result and a last {"exit": ...} line.
//
//   node pty_client.mjs URL KEY SANDBOX_ID 'QUERY' 'STEPS_JSON'
// Steps: {"send": "text"} (typed, binary), {"text": {...}} (a JSON control message),
// {"expect": "regex", "timeout": S} (waits until the screen output matches; prints
// {"expect", "ok"}), {"sleep": S}, {"close": true} (leaves without exiting the shell),
// {"wait_exit": S} (waits for the exit message), {"wait_close": S} (for the close alone), {"send_bytes": N} (N bytes of "x", typed in
// 64 KiB messages as fast as the socket takes them: a paste).
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(join(dirname(fileURLToPath(import.meta.url)), "../mcp/package.json"));
const WebSocket = require("ws");

const [url, key, sbx, query, stepsJson] = process.argv.slice(2);
const steps = JSON.parse(stepsJson || "[]");
const wsUrl = url.replace(/^http/, "ws") + `/v1/sandboxes/${sbx}/pty` + (query ? `?${query}` : "");
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// {"many": N, "keys": [K2, ...]}: N terminals at once, their keys taken in turn (one key alone
// meets its own cap of requests in flight first); prints {"counts": {"started": n,
// "STATUS:CODE": n}} and closes all (after "hold" seconds if given: a benchmark measures
// memory meanwhile).
if (!Array.isArray(steps) && steps.many) {
  const keys = [key, ...(steps.keys || [])];
  const results = await Promise.all(
    Array.from({ length: steps.many }, (_, i) =>
      new Promise((resolve) => {
        const c = new WebSocket(wsUrl, { headers: { Authorization: `Bearer ${keys[i % keys.length]}` } });
        const t = setTimeout(() => resolve({ c, r: "timeout" }), 60000);
        c.on("unexpected-response", (req, res) => {
          let body = "";
          res.on("data", (d) => (body += d));
          res.on("end", () => {
            clearTimeout(t);
            let code = "?";
            try { code = JSON.parse(body).error.code; } catch {}
            resolve({ c: null, r: `${res.statusCode}:${code}` });
          });
        });
        c.on("error", () => { clearTimeout(t); resolve({ c: null, r: "error" }); });
        c.on("message", (d, bin) => {
          if (!bin && JSON.parse(d.toString()).type === "started") { clearTimeout(t); resolve({ c, r: "started" }); }
        });
      })));
  const counts = {};
  for (const { r } of results) counts[r] = (counts[r] || 0) + 1;
  out({ counts });
  if (steps.hold) await new Promise((r) => setTimeout(r, steps.hold * 1000));
  for (const { c } of results) if (c) c.close(1000, "bye");
  await new Promise((r) => setTimeout(r, 500));
  process.exit(0);
}

let screen = "";
let exitMsg = null;
let started = null;
let closed = null;
const ws = new WebSocket(wsUrl, { headers: { Authorization: `Bearer ${key}` } });
ws.on("unexpected-response", (req, res) => {
  let body = "";
  res.on("data", (d) => (body += d));
  res.on("end", () => {
    out({ refused: res.statusCode, body });
    process.exit(0);
  });
});
ws.on("error", (e) => {
  out({ error: String(e) });
  process.exit(1);
});
ws.on("message", (data, isBinary) => {
  if (isBinary) {
    screen += data.toString("utf8");
    return;
  }
  const m = JSON.parse(data.toString());
  if (m.type === "started") started = m;
  if (m.type === "exit") exitMsg = m;
});
ws.on("close", (code, reason) => {
  closed = { code, reason: reason.toString() };
});

const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));
async function until(pred, timeout) {
  const end = Date.now() + timeout * 1000;
  while (Date.now() < end) {
    if (pred()) return true;
    await sleep(0.02);
  }
  return pred();
}

await new Promise((r) => ws.on("open", r));
await until(() => started, 10);
out({ started });
let mark = 0; // expectations look at the output since the last one matched
for (const step of steps) {
  if (step.send !== undefined) ws.send(Buffer.from(step.send, "utf8"), { binary: true });
  else if (step.send_bytes) {
    const chunk = Buffer.alloc(65536, "x");
    for (let left = step.send_bytes; left > 0; left -= chunk.length) {
      ws.send(left >= chunk.length ? chunk : chunk.subarray(0, left), { binary: true });
      while (ws.bufferedAmount > (1 << 20)) await sleep(0.01);
    }
    out({ sent_bytes: step.send_bytes });
  }
  else if (step.text) ws.send(JSON.stringify(step.text));
  else if (step.sleep) await sleep(step.sleep);
  else if (step.expect) {
    const re = new RegExp(step.expect);
    const t0 = Date.now();
    const ok = await until(() => re.test(screen.slice(mark)), step.timeout || 10);
    const m = screen.slice(mark).match(re);
    if (m) mark += m.index + m[0].length;
    out({ expect: step.expect, ok, ms: Date.now() - t0, tail: ok ? undefined : screen.slice(-300) });
  } else if (step.close) {
    ws.close(1000, "bye");
    await until(() => closed, 5);
    out({ closed });
    process.exit(0);
  } else if (step.wait_exit) {
    await until(() => exitMsg && closed, step.wait_exit);
  } else if (step.wait_close) {
    await until(() => closed, step.wait_close);
  }
}
out({ exit: exitMsg, closed });
process.exit(0);
