// The official MCP TypeScript SDK against b3osd's /mcp (docs/mcp.md): connects over streamable
// HTTP or over stdio (`b3os mcp`), lists the tools and calls every one, each result checked by
// the SDK against the tool's outputSchema (Client.callTool validates structuredContent once
// listTools has run; a mismatch throws, which is a FAIL here).
//
//   node sdk_test.mjs http URL KEY        URL = http://127.0.0.1:PORT
//   node sdk_test.mjs stdio URL KEY B3OS  B3OS = the b3os CLI binary
// Prints PASS/FAIL lines (name and detail) and exits 1 on any FAIL.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [mode, url, key, cli] = process.argv.slice(2);
const prefix = `sdk_${mode}`;
let failed = 0;
const pass = (name) => console.log(`PASS ${prefix}.${name}`);
const fail = (name, detail) => {
  failed++;
  console.log(`FAIL ${prefix}.${name}: ${detail}`);
};
const check = (name, ok, detail) => (ok ? pass(name) : fail(name, detail));
const api = async (method, path, body) => {
  const r = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
};
const text = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");

const client = new Client({ name: "b3os-tests", version: "1.0.0" });
const transport =
  mode === "stdio"
    ? new StdioClientTransport({ command: cli, args: ["mcp", "--toolsets", "all"], env: { ...process.env, B3OS_API_URL: url, B3OS_API_KEY: key }, stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(`${url}/mcp?toolsets=all`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } });

const called = new Set();
async function call(name, args, opts) {
  called.add(name);
  return client.callTool({ name, arguments: args }, undefined, { timeout: 120000, ...(opts ?? {}) });
}

const made = [];
try {
  await client.connect(transport);
  pass("connect");
  check("server_info", client.getServerVersion()?.name === "b3os", JSON.stringify(client.getServerVersion()));
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  const want = ["sandbox_create", "sandbox_list", "sandbox_get", "sandbox_delete", "sandbox_exec", "sandbox_write_file",
    "sandbox_read_file", "sandbox_list_files", "sandbox_fork", "sandbox_pause", "sandbox_resume", "sandbox_snapshot",
    "snapshot_list", "snapshot_get", "snapshot_delete", "template_list"];
  check("tools_listed", want.every((n) => names.includes(n)), `got ${names.join(",")}`);
  check("tools_described", tools.every((t) => t.title && t.description && t.inputSchema?.type === "object" && t.outputSchema?.type === "object"),
    "every tool needs a title, a description, an inputSchema and an outputSchema");

  // ---- a sandbox through the tools
  let r = await call("sandbox_create", { timeout_s: 600, metadata: { suite: "mcp" } });
  const sbx = r.structuredContent?.id;
  if (sbx) made.push(sbx);
  check("create", !r.isError && /^sbx_/.test(sbx ?? "") && r.structuredContent.status === "running", text(r));
  r = await call("sandbox_create", { forkable: true });
  check("create_refuses_forkable", r.isError === true && /invalid_request: forkable/.test(text(r)), text(r));
  r = await call("sandbox_create", { api: { scopes: ["infer:run"], spend_cap_usd: 1 } });
  check("create_refuses_api_grant", r.isError === true && /invalid_request: api/.test(text(r)), text(r));
  r = await call("sandbox_list", { status: "running", limit: 100 });
  check("list", r.structuredContent?.data?.some((s) => s.id === sbx), text(r));
  r = await call("sandbox_get", { sandbox_id: sbx });
  check("get", r.structuredContent?.id === sbx, text(r));
  r = await call("sandbox_get", { sandbox_id: "sbx_00000000000000000000000000" });
  check("get_unknown_is_error", r.isError === true && /^sandbox_not_found: /.test(text(r)), text(r));

  r = await call("sandbox_write_file", { sandbox_id: sbx, path: "hello.txt", content: "héllo, wörld\n" });
  check("write_text", !r.isError && r.structuredContent.path === "/workspace/hello.txt" && r.structuredContent.size === 15, text(r));
  const bin = Buffer.from([0, 1, 2, 255, 254, 10, 0x80]);
  r = await call("sandbox_write_file", { sandbox_id: sbx, path: "/workspace/bin.dat", content: bin.toString("base64"), encoding: "base64" });
  check("write_base64", !r.isError && r.structuredContent.size === bin.length, text(r));
  r = await call("sandbox_write_file", { sandbox_id: sbx, path: "x", content: "!!", encoding: "base64" });
  check("write_bad_base64_is_error", r.isError === true && /invalid_request/.test(text(r)), text(r));
  r = await call("sandbox_read_file", { sandbox_id: sbx, path: "hello.txt" });
  check("read_text", r.structuredContent?.encoding === "utf8" && r.structuredContent.content === "héllo, wörld\n", JSON.stringify(r.structuredContent));
  r = await call("sandbox_read_file", { sandbox_id: sbx, path: "bin.dat" });
  check("read_binary_base64", r.structuredContent?.encoding === "base64" && Buffer.from(r.structuredContent.content, "base64").equals(bin),
    JSON.stringify(r.structuredContent));
  r = await call("sandbox_read_file", { sandbox_id: sbx, path: "/workspace/missing.txt" });
  check("read_missing_is_error", r.isError === true && /^file_not_found: /.test(text(r)), text(r));
  r = await call("sandbox_list_files", { sandbox_id: sbx });
  check("list_files", ["hello.txt", "bin.dat"].every((n) => r.structuredContent?.data?.some((e) => e.name === n)), text(r));

  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: "echo $GREETING from $(pwd); cat; exit 3", env: { GREETING: "hi" }, cwd: "/tmp", stdin: "in\n" });
  check("exec_shell", r.structuredContent?.exit_code === 3 && r.structuredContent.stdout === "hi from /tmp\nin\n" && !r.isError, JSON.stringify(r.structuredContent));
  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: ["python3", "-c", "import sys; print(6*7); print('e', file=sys.stderr)"] });
  check("exec_argv", r.structuredContent?.stdout === "42\n" && r.structuredContent.stderr === "e\n", JSON.stringify(r.structuredContent));
  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: "sleep 5", timeout_ms: 300 });
  check("exec_timeout_is_error", r.isError === true && r.structuredContent?.timed_out === true, JSON.stringify(r));
  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: "" });
  check("exec_bad_args_is_error", r.isError === true && /invalid_request: cmd/.test(text(r)), text(r));
  // Progress: a call that asks for it gets notifications while the command runs.
  const progress = [];
  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: "sleep 2.5; echo done" }, { onprogress: (p) => progress.push(p) });
  check("exec_progress", r.structuredContent?.stdout === "done\n" && progress.length >= 1, `${progress.length} progress notifications`);
  // Cancellation: the SDK sends notifications/cancelled; the command inside is stopped.
  const ac = new AbortController();
  setTimeout(() => ac.abort(), 1000);
  let aborted = false;
  try {
    await call("sandbox_exec", { sandbox_id: sbx, cmd: "sleep 30; echo never > /tmp/cancel-proof" }, { signal: ac.signal });
  } catch {
    aborted = true;
  }
  await new Promise((res) => setTimeout(res, 1500));
  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: "pgrep -x sleep >/dev/null && echo running || echo stopped" });
  check("exec_cancelled", aborted && r.structuredContent?.stdout === "stopped\n", `aborted=${aborted} ${r.structuredContent?.stdout}`);

  r = await call("sandbox_pause", { sandbox_id: sbx });
  check("pause", r.structuredContent?.status === "paused", text(r));
  r = await call("sandbox_exec", { sandbox_id: sbx, cmd: "true" });
  check("exec_paused_is_error", r.isError === true && /sandbox_not_running/.test(text(r)), text(r));
  r = await call("sandbox_resume", { sandbox_id: sbx });
  check("resume", r.structuredContent?.status === "running", text(r));
  r = await call("sandbox_snapshot", { sandbox_id: sbx });
  const snp = r.structuredContent?.id;
  check("snapshot", /^snp_/.test(snp ?? ""), text(r));
  r = await call("snapshot_list", {});
  check("snapshot_list", r.structuredContent?.data?.some((s) => s.id === snp), text(r));
  r = await call("snapshot_get", { snapshot_id: snp });
  check("snapshot_get", r.structuredContent?.id === snp, text(r));
  r = await call("snapshot_delete", { snapshot_id: snp });
  check("snapshot_delete", r.structuredContent?.id === snp && !r.isError, text(r));
  r = await call("template_list", {});
  check("template_list", r.structuredContent?.data?.some((t) => t.name === "base"), text(r));

  // ---- fork: the source is created forkable with the REST API, with the same key
  r = await call("sandbox_fork", { sandbox_id: sbx, count: 2 });
  check("fork_not_forkable_is_error", r.isError === true && /^fork_unavailable: /.test(text(r)), text(r));
  const src = await api("POST", "/v1/sandboxes", { forkable: true, timeout_s: 600 });
  made.push(src.body.id);
  await call("sandbox_write_file", { sandbox_id: src.body.id, path: "state.txt", content: "source\n" });
  r = await call("sandbox_fork", { sandbox_id: src.body.id, count: 2 });
  const forks = (r.structuredContent?.data ?? []).map((s) => s.id);
  made.push(...forks);
  check("fork", forks.length === 2 && !r.isError, text(r));
  let same = true;
  for (const f of forks) {
    const x = await call("sandbox_read_file", { sandbox_id: f, path: "state.txt" });
    same &&= x.structuredContent?.content === "source\n";
  }
  check("fork_has_source_files", same, "each fork reads the source's state.txt");

  for (const id of made) {
    r = await call("sandbox_delete", { sandbox_id: id });
    check(`delete.${id.slice(-5)}`, r.structuredContent?.status === "stopped", text(r));
  }
  made.length = 0;
  const missing = want.filter((n) => !called.has(n));
  check("every_tool_called", missing.length === 0, `not called: ${missing.join(",")}`);
  // A protocol error: an unknown tool is a JSON-RPC error (-32602), not a result.
  try {
    await client.callTool({ name: "no_such_tool", arguments: {} });
    fail("unknown_tool_protocol_error", "no error");
  } catch (e) {
    check("unknown_tool_protocol_error", e.code === -32602, `${e.code} ${e.message}`);
  }
  await client.close();
  pass("close");
} catch (e) {
  fail("unexpected", e?.stack ?? String(e));
  for (const id of made) await api("DELETE", `/v1/sandboxes/${id}`).catch(() => {});
}
process.exit(failed ? 1 : 0);
