// The e2b SDK's side of bench/e2b.py (here, beside the SDK it imports):
// alternating call by call, so both sides see the same moment,
//   exec:   sandbox.commands.run('true') | REST exec of ["true"] | REST exec of the argv the
//           SDK runs (["/bin/bash", "-l", "-c", "true"]), each on a kept-alive connection;
//   create: Sandbox.create() then commands.run('true') | REST create then exec of ["true"];
// with GAP_MS between calls, so that each is measured alone (what the agent does in the
// background after a command, such as starting the next login shell, is done by then: an agent
// driven by a model leaves seconds between commands); then the same calls back to back: bursts
// of 10 of each kind after a pause of a second, and 50 in a row with no pause (the agent has no
// quiet moment to make a shell ready); and prints the samples as JSON on its last line.
//   node bench_sdk.mjs URL ADMIN_KEY CALLS CREATES [GAP_MS]   (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)
import { Sandbox } from 'e2b'
import { Agent, request } from 'undici'

const [url, key, calls, creates] = [process.argv[2], process.argv[3], +process.argv[4], +process.argv[5]]
const gapMs = process.argv[6] === undefined ? 150 : +process.argv[6]
const sleep = (n) => new Promise((r) => setTimeout(r, n))
const agent = new Agent({ keepAliveTimeout: 60_000 })
async function rest(method, path, body) {
  const r = await request(url + path, { method, dispatcher: agent, body: body && JSON.stringify(body),
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } })
  const text = await r.body.text()
  if (r.statusCode >= 300) throw new Error(`${method} ${path}: ${r.statusCode} ${text}`)
  return text ? JSON.parse(text) : null
}
const ms = async (fn) => { const t0 = performance.now(); await fn(); return performance.now() - t0 }

const out = { sdk_run: [], sdk_cold: [], rest_true: [], rest_bash: [], sdk_burst: [], sdk_cold_burst: [], rest_burst: [], sdk_long: [], rest_long: [],
  sdk_create_run: [], rest_create_exec: [] }
// A command whose environment differs from the last one's finds no login shell started ahead
// (docs/e2b.md): the same call, the way it went before there was one.
let n = 0
const coldRun = () => sbx.commands.run('true', { envs: { BENCH_CALL_N: String(n++) } })
const sbx = await Sandbox.create('base')
for (let i = 0; i < 10; i++) { await sbx.commands.run('true'); await rest('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['true'] }) }
const restTrue = () => rest('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['true'] })
for (let i = 0; i < calls; i++) {
  await sleep(gapMs)
  out.sdk_run.push(await ms(() => sbx.commands.run('true')))
  await sleep(gapMs)
  out.sdk_cold.push(await ms(coldRun))
  await sleep(gapMs)
  out.sdk_run.push(await ms(() => sbx.commands.run('true')))
  await sleep(gapMs)
  out.rest_true.push(await ms(restTrue))
  await sleep(gapMs)
  out.rest_bash.push(await ms(() => rest('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['/bin/bash', '-l', '-c', 'true'] })))
}
// Back to back: bursts of 10 of one kind, then REST's, turn about, each after a pause of a
// second (an agent's turn: a few commands in a row, then the model thinks); then one run of 50
// of each with no pause at all. The bursts with a new environment each call come after all
// others, as a client that changes its environment each time ends the login shells waiting
// for the last one (docs/e2b.md).
const pauseMs = 1000
for (let i = 0; i < calls; i += 10) {
  await sleep(pauseMs)
  for (let j = 0; j < 10; j++) out.sdk_burst.push(await ms(() => sbx.commands.run('true')))
  await sleep(pauseMs)
  for (let j = 0; j < 10; j++) out.rest_burst.push(await ms(restTrue))
}
await sleep(pauseMs)
for (let j = 0; j < 50; j++) out.sdk_long.push(await ms(() => sbx.commands.run('true')))
for (let j = 0; j < 50; j++) out.rest_long.push(await ms(restTrue))
for (let i = 0; i < calls; i += 10) {
  await sleep(pauseMs)
  for (let j = 0; j < 10; j++) out.sdk_cold_burst.push(await ms(coldRun))
  await sleep(pauseMs)
  for (let j = 0; j < 10; j++) out.rest_burst.push(await ms(restTrue))
}
await sbx.kill()
// Each create finds the warm pool refilled (2 s after the last claim): without the pause one
// kind would take the pool's only sandbox and the other would pay a cold start.
const pause = () => new Promise((r) => setTimeout(r, 2000))
for (let i = 0; i < creates; i++) {
  let s
  await pause()
  out.sdk_create_run.push(await ms(async () => { s = await Sandbox.create('base'); await s.commands.run('true') }))
  await s.kill()
  let id
  await pause()
  out.rest_create_exec.push(await ms(async () => {
    id = (await rest('POST', '/v1/sandboxes', { template: 'base' })).id
    await rest('POST', `/v1/sandboxes/${id}/exec`, { cmd: ['true'] })
  }))
  await rest('DELETE', `/v1/sandboxes/${id}`)
}
console.log(JSON.stringify(out))
