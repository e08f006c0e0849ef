// The e2b SDK's side of bench/e2b.py (here, beside the SDK it imports):
// alternating call by call, so both sides see the same moment,
//   exec:   sandbox.commands.run('true') | REST exec of ["true"] | REST exec of the argv the
//           SDK runs (["/bin/bash", "-l", "-c", "true"]), each on a kept-alive connection;
//   create: Sandbox.create() then commands.run('true') | REST create then exec of ["true"];
// and prints the samples as JSON on its last line.
//   node bench_sdk.mjs URL ADMIN_KEY CALLS CREATES   (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)
import { Sandbox } from 'e2b'
import { Agent, request } from 'undici'

const [url, key, calls, creates] = [process.argv[2], process.argv[3], +process.argv[4], +process.argv[5]]
const agent = new Agent({ keepAliveTimeout: 60_000 })
async function rest(method, path, body) {
  const r = await request(url + path, { method, dispatcher: agent, body: body && JSON.stringify(body),
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } })
  const text = await r.body.text()
  if (r.statusCode >= 300) throw new Error(`${method} ${path}: ${r.statusCode} ${text}`)
  return text ? JSON.parse(text) : null
}
const ms = async (fn) => { const t0 = performance.now(); await fn(); return performance.now() - t0 }

const out = { sdk_run: [], rest_true: [], rest_bash: [], sdk_create_run: [], rest_create_exec: [] }
const sbx = await Sandbox.create('base')
for (let i = 0; i < 10; i++) { await sbx.commands.run('true'); await rest('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['true'] }) }
for (let i = 0; i < calls; i++) {
  out.sdk_run.push(await ms(() => sbx.commands.run('true')))
  out.rest_true.push(await ms(() => rest('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['true'] })))
  out.rest_bash.push(await ms(() => rest('POST', `/v1/sandboxes/${sbx.sandboxId}/exec`, { cmd: ['/bin/bash', '-l', '-c', 'true'] })))
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
