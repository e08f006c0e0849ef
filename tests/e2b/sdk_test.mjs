// The unmodified e2b SDK (tests/e2b/package.json pins it) against b3osd: every call of
// docs/e2b.md's table that b3os serves, with its results, errors and streaming callbacks.
// Prints PASS/FAIL lines for tests/e2b/e2b.sh; "#" lines are information.
//
//   E2B_API_URL=http://127.0.0.1:PORT E2B_SANDBOX_URL=http://127.0.0.1:PORT E2B_API_KEY=e2b_... \
//     node sdk_test.mjs OTHER_PROJECT_KEY
import http from 'node:http'
import { Sandbox, CommandExitError, NotFoundError, AuthenticationError, TimeoutError, FileType } from 'e2b'
import { makeChecks } from './checks.mjs'

const otherKey = process.argv[2]
const { check, rejects, fail, done } = makeChecks('sdk')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const until = async (fn, ms = 10000) => {
  const end = Date.now() + ms
  while (Date.now() < end) { if (await fn()) return true; await sleep(100) }
  return false
}

const tag = `e2b-${process.pid}`
let sbx
await check('create', async () => {
  sbx = await Sandbox.create('base', { timeoutMs: 120_000, envs: { GREETING: 'hi' }, metadata: { suite: tag, note: 'a b&c=d%+' } })
  return typeof sbx.sandboxId === 'string' && sbx.sandboxId.startsWith('sbx_')
})
if (!sbx) { console.log('# no sandbox: nothing more to test'); process.exit(1) }
console.log(`# sandbox ${sbx.sandboxId}`)

// ---- the control plane ----
await check('is_running', async () => (await sbx.isRunning()) === true)
await check('get_info', async () => {
  const info = await sbx.getInfo()
  return info.sandboxId === sbx.sandboxId && info.state === 'running' && info.metadata.suite === tag &&
    info.templateId === 'base' && info.endAt instanceof Date
})
await check('list_by_metadata', async () => {
  const pager = Sandbox.list({ query: { metadata: { suite: tag }, state: ['running'] } })
  const items = await pager.nextItems()
  return items.length === 1 && items[0].sandboxId === sbx.sandboxId
})
await check('list_metadata_with_escapes', async () => {
  const items = await Sandbox.list({ query: { metadata: { suite: tag, note: 'a b&c=d%+' } } }).nextItems()
  return items.length === 1 && items[0].sandboxId === sbx.sandboxId
})
await check('list_by_template_and_start', async () => {
  const before = new Date(Date.now() - 3_600_000)
  const mine = await Sandbox.list({ query: { metadata: { suite: tag }, template: 'base', startedAfter: before } }).nextItems()
  const other = await Sandbox.list({ query: { metadata: { suite: tag }, template: 'no-such' } }).nextItems()
  const later = await Sandbox.list({ query: { metadata: { suite: tag }, startedAfter: new Date(Date.now() + 60_000) } }).nextItems()
  return mine.length === 1 && other.length === 0 && later.length === 0
})
await check('set_timeout', async () => { await sbx.setTimeout(300_000); return true })
await check('connect_running', async () => {
  const again = await Sandbox.connect(sbx.sandboxId)
  return (await again.commands.run('echo same')).stdout === 'same\n'
})

// ---- commands ----
await check('run_stdout', async () => {
  const r = await sbx.commands.run('echo hello')
  return r.exitCode === 0 && r.stdout === 'hello\n' && r.stderr === ''
})
await check('run_envs_create_and_call', async () => {
  const r = await sbx.commands.run('echo "$GREETING $NAME"', { envs: { NAME: 'b3os' } })
  return r.stdout === 'hi b3os\n'
})
await check('run_cwd', async () => (await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout === '/tmp\n')
await check('run_user', async () => (await sbx.commands.run('id -un', { user: 'root' })).stdout === 'root\n')
await rejects('run_exit_code', () => sbx.commands.run('echo out; echo err >&2; exit 3'), CommandExitError,
  (e) => e.exitCode === 3 && e.stdout === 'out\n' && e.stderr === 'err\n')
await check('run_callbacks', async () => {
  const out = []; const err = []
  await sbx.commands.run('for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.1; done',
    { onStdout: (d) => out.push(d), onStderr: (d) => err.push(d) })
  return out.join('') === 'o1\no2\no3\n' && err.join('') === 'e1\ne2\ne3\n' && out.length >= 2
})
await rejects('run_timeout', () => sbx.commands.run('sleep 20', { timeoutMs: 1500 }), TimeoutError)
// As E2B's envd: the command itself is killed at its timeoutMs, not left running.
await check('run_timeout_kills_the_command', async () =>
  until(async () => !(await sbx.commands.list()).some((p) => (p.args || []).join(' ').includes('sleep 20'))))
await check('run_binary_output', async () => {
  const r = await sbx.commands.run("printf 'a\\000b'")
  return r.stdout.length === 3
})

// background processes
let bg
await check('background_start', async () => {
  bg = await sbx.commands.run('echo started; sleep 60', { background: true, tag: 'sleeper' })
  return typeof bg.pid === 'number' && bg.pid > 0
})
await check('commands_list', async () => {
  const list = await sbx.commands.list()
  return list.some((p) => p.pid === bg.pid && p.cmd === '/bin/bash')
})
await check('background_kill', async () => {
  const killed = await bg.kill()
  try { await bg.wait() } catch (e) { if (!(e instanceof CommandExitError)) throw e }
  return killed === true
})
await check('stdin_and_close', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'line one\n')
  await sbx.commands.sendStdin(h.pid, 'line two\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  return r.stdout === 'line one\nline two\n' && r.exitCode === 0
})
await check('commands_connect', async () => {
  const h = await sbx.commands.run('sleep 1; echo later; sleep 0.5', { background: true })
  const seen = []
  const again = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
  const r = await again.wait()
  return r.exitCode === 0 && seen.join('').includes('later')
})
await check('commands_kill_by_pid', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true })
  const ok = await sbx.commands.kill(h.pid)
  const gone = await until(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
  return ok && gone
})

// ---- pty ----
await check('pty_create_input_resize_exit', async () => {
  let out = ''
  const enc = new TextEncoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += new TextDecoder().decode(d) } })
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo "term=$TERM"\n'))
  const sized = await until(() => out.includes('24 80') && out.includes('term=xterm-256color'))
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc.encode('stty size\n'))
  const resized = await until(() => out.includes('30 100'))
  const listed = (await sbx.commands.list()).some((p) => p.pid === h.pid)
  await sbx.pty.sendInput(h.pid, enc.encode('exit 7\n'))
  let code
  try { code = (await h.wait()).exitCode } catch (e) { if (!(e instanceof CommandExitError)) throw e; code = e.exitCode }
  if (!(sized && resized && listed && code === 7)) throw new Error(`sized ${sized} resized ${resized} listed ${listed} exit ${code}; saw ${JSON.stringify(out.slice(-300))}`)
  return true
})
await check('pty_kill', async () => {
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
  const killed = await sbx.pty.kill(h.pid)
  const gone = await until(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
  return killed && gone
})

// ---- files ----
await check('files_write_read', async () => {
  const info = await sbx.files.write('/workspace/hello.txt', 'hello file')
  const text = await sbx.files.read('/workspace/hello.txt')
  return info.path === '/workspace/hello.txt' && text === 'hello file'
})
await check('files_bytes', async () => {
  const bytes = new Uint8Array(70000).map((_, i) => i % 251)
  await sbx.files.write('/workspace/bytes.bin', bytes.buffer)
  const back = await sbx.files.read('/workspace/bytes.bin', { format: 'bytes' })
  return back.length === bytes.length && back.every((b, i) => b === bytes[i])
})
await check('files_stream', async () => {
  const chunks = ['one ', 'two ', 'three']
  const stream = new ReadableStream({ start(c) { for (const s of chunks) c.enqueue(new TextEncoder().encode(s)); c.close() } })
  await sbx.files.write('/workspace/streamed.txt', stream)
  const rs = await sbx.files.read('/workspace/streamed.txt', { format: 'stream' })
  let text = ''
  for await (const part of rs) text += new TextDecoder().decode(part)
  return text === 'one two three'
})
await check('files_write_many', async () => {
  const infos = await sbx.files.write([
    { path: '/workspace/many/a.txt', data: 'A' },
    { path: '/workspace/many/b.txt', data: 'B' },
    { path: '/workspace/many/sub/c.txt', data: 'C' },
  ])
  const r = await sbx.commands.run('cat /workspace/many/a.txt /workspace/many/b.txt /workspace/many/sub/c.txt')
  return infos.length === 3 && r.stdout === 'ABC'
})
await check('files_exists', async () =>
  (await sbx.files.exists('/workspace/hello.txt')) === true && (await sbx.files.exists('/workspace/nope')) === false)
await check('files_list', async () => {
  const entries = await sbx.files.list('/workspace/many')
  const names = entries.map((e) => e.name).sort().join(',')
  const sub = entries.find((e) => e.name === 'sub')
  return names === 'a.txt,b.txt,sub' && sub.type === FileType.DIR
})
await check('files_list_depth', async () => {
  const entries = await sbx.files.list('/workspace/many', { depth: 2 })
  return entries.some((e) => e.path === '/workspace/many/sub/c.txt')
})
await check('files_get_info', async () => {
  const i = await sbx.files.getInfo('/workspace/hello.txt')
  return i.type === FileType.FILE && i.size === 10 && i.owner === 'root' && i.permissions.startsWith('-rw') &&
    i.modifiedTime instanceof Date
})
await check('files_make_dir', async () =>
  (await sbx.files.makeDir('/workspace/newdir/deep')) === true && (await sbx.files.makeDir('/workspace/newdir/deep')) === false)
await check('files_rename', async () => {
  const i = await sbx.files.rename('/workspace/hello.txt', '/workspace/renamed.txt')
  return i.path === '/workspace/renamed.txt' && (await sbx.files.read('/workspace/renamed.txt')) === 'hello file'
})
await check('files_remove', async () => {
  await sbx.files.remove('/workspace/many')
  return (await sbx.files.exists('/workspace/many')) === false
})
await rejects('files_read_missing', () => sbx.files.read('/workspace/missing.txt'), NotFoundError)
await check('files_watch_dir', async () => {
  await sbx.files.makeDir('/workspace/watched')
  const events = []
  const handle = await sbx.files.watchDir('/workspace/watched', (e) => events.push(e))
  await sbx.files.write('/workspace/watched/new.txt', 'x')
  const seen = await until(async () => events.some((e) => e.name === 'new.txt'))
  await handle.stop()
  return seen
})
await check('files_upload_download_urls', async () => {
  const up = await sbx.uploadUrl('/workspace/via-url.txt')
  const form = new FormData()
  form.append('file', new Blob(['through a signed URL']), 'via-url.txt')
  const put = await fetch(up, { method: 'POST', body: form })
  const down = await sbx.downloadUrl('/workspace/via-url.txt')
  const got = await fetch(down)
  const forged = await fetch(down.replace(/signature=v1_[^&]*/, 'signature=v1_forged'))
  return put.ok && got.ok && (await got.text()) === 'through a signed URL' && forged.status === 401
})

// ---- ports: getHost ----
// An app that answers with the request headers it got, on port 8000 of the sandbox.
const headerApp = `import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('127.0.0.1', 8000), H).serve_forever()
`
// GET / on getHost(8000) through the preview listener (the host names the sandbox; the
// listener's address is the domain's port, on this machine).
function previewGet(host, headers = {}) {
  const port = Number(host.split(':').pop())
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/', headers: { Host: host, ...headers }, timeout: 15000 }, (res) => {
      let body = ''
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', (e) => resolve({ status: 0, body: String(e) }))
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.end()
  })
}
async function startApp(box) {
  await box.files.write('/tmp/app.py', headerApp)
  await box.commands.run('python3 /tmp/app.py', { background: true, timeoutMs: 0 })
  return until(async () => (await box.commands.run('python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8000))" && echo up || true')).stdout === 'up\n')
}
await check('get_host_public', async () => {
  // E2B's default: public traffic, every port served without a token.
  if (!(await startApp(sbx))) return false
  const host = sbx.getHost(8000)
  const r = await previewGet(host)
  return host.startsWith(`8000-${sbx.sandboxId}.`) && r.status === 200 && JSON.parse(r.body).host === host
})
let priv
await check('get_host_private_needs_token', async () => {
  priv = await Sandbox.create('base', { network: { allowPublicTraffic: false }, metadata: { suite: tag } })
  if (!priv.trafficAccessToken || !(await startApp(priv))) return false
  const host = priv.getHost(8000)
  const none = await previewGet(host)
  const wrong = await previewGet(host, { 'e2b-traffic-access-token': 'x'.repeat(32) })
  const right = await previewGet(host, { 'e2b-traffic-access-token': priv.trafficAccessToken })
  // The app never sees the token.
  return none.status === 401 && wrong.status === 401 && right.status === 200 &&
    !('e2b-traffic-access-token' in JSON.parse(right.body))
})
if (priv) await priv.kill()

// ---- pause and resume ----
await check('pause', async () => {
  await sbx.commands.run('echo kept > /workspace/kept.txt')
  await sbx.pause()
  return (await sbx.getInfo()).state === 'paused'
})
// Open ports let anyone with the host in: they neither resume a paused sandbox nor keep it alive.
await check('public_port_does_not_resume', async () => {
  const r = await previewGet(sbx.getHost(8000))
  return r.status === 409 && (await sbx.getInfo()).state === 'paused'
})
await check('resume_on_connect', async () => {
  const resumed = await Sandbox.connect(sbx.sandboxId)
  const r = await resumed.commands.run('cat /workspace/kept.txt')
  return r.stdout === 'kept\n' && (await resumed.getInfo()).state === 'running'
})

// ---- what E2B's create says that b3os maps ----
await check('allow_internet_access_false_is_egress_deny', async () => {
  const box = await Sandbox.create('base', { allowInternetAccess: false, metadata: { suite: tag } })
  try {
    const res = await fetch(`${process.env.B3OS_API_URL}/v1/sandboxes/${box.sandboxId}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
    return res.status === 200 && (await res.json()).egress.mode === 'deny'
  } finally { await box.kill() }
})
await check('on_timeout_pause', async () => {
  const box = await Sandbox.create('base', { timeoutMs: 2000, lifecycle: { onTimeout: 'pause' }, metadata: { suite: tag } })
  try {
    await box.files.write('/workspace/kept.txt', 'kept')
    if (!(await until(async () => (await box.getInfo()).state === 'paused', 20000))) return false
    const again = await Sandbox.connect(box.sandboxId)
    return (await again.files.read('/workspace/kept.txt')) === 'kept' && (await again.getInfo()).state === 'running'
  } finally { await box.kill() }
})
await rejects('fork_of_a_sandbox_not_forkable', () => Sandbox.fork(sbx.sandboxId, { count: 1 }), Error,
  (e) => /forkable/.test(e.message))

// ---- errors ----
await rejects('connect_unknown_404', () => Sandbox.connect('sbx_01m00000000000000000000000'), NotFoundError)
await rejects('bad_key_401', () => Sandbox.list({ apiKey: 'e2b_' + '0'.repeat(40) }).nextItems(), AuthenticationError)
if (otherKey) {
  await rejects('other_project_404', () => Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
  await rejects('other_project_kill_404', () => Sandbox.kill(sbx.sandboxId, { apiKey: otherKey }).then((ok) => { if (!ok) throw new NotFoundError('false') }), NotFoundError)
}

// ---- kill ----
await check('kill', async () => {
  await sbx.kill()
  return (await sbx.isRunning()) === false
})
await rejects('get_info_after_kill_404', () => sbx.getInfo(), NotFoundError)

done()
