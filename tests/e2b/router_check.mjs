// The unmodified e2b SDK through b3os-router (tests/cluster/cluster.sh runs it): creates
// placed on the cluster's nodes, envd requests relayed to the node holding the sandbox (they
// carry its token, not a key), the other router reaching the same sandbox, errors in E2B's
// shape, and a signed URL (which names no sandbox) refused saying why.
//
//   E2B_API_URL=ROUTER0 E2B_SANDBOX_URL=ROUTER0 E2B_API_KEY=e2b_... node router_check.mjs ROUTER1
import { Sandbox, NotFoundError, AuthenticationError } from 'e2b'
import { makeChecks } from './checks.mjs'

const other = process.argv[2]
const { check, rejects, done } = makeChecks('e2b_router')
let sbx
await check('create', async () => {
  sbx = await Sandbox.create('base', { metadata: { suite: `router-${process.pid}` } })
  return sbx.sandboxId.startsWith('sbx_')
})
if (sbx) {
  await check('command', async () => (await sbx.commands.run('echo hi')).stdout === 'hi\n')
  await check('files', async () => {
    await sbx.files.write('/workspace/r.txt', 'through the router')
    return (await sbx.files.read('/workspace/r.txt')) === 'through the router'
  })
  await check('background_and_list', async () => {
    const h = await sbx.commands.run('sleep 30', { background: true })
    const listed = (await sbx.commands.list()).some((p) => p.pid === h.pid)
    await h.kill()
    return listed
  })
  await check('get_info_and_list', async () => {
    const info = await sbx.getInfo()
    const items = await Sandbox.list({ query: { metadata: { suite: `router-${process.pid}` } } }).nextItems()
    return info.state === 'running' && items.length === 1 && items[0].sandboxId === sbx.sandboxId
  })
  await check('other_router', async () => {
    const again = await Sandbox.connect(sbx.sandboxId, { apiUrl: other, sandboxUrl: other })
    return (await again.files.read('/workspace/r.txt')) === 'through the router' &&
      (await again.commands.run('echo there')).stdout === 'there\n'
  })
  await check('signed_url_refused_saying_why', async () => {
    const r = await fetch(await sbx.downloadUrl('/workspace/r.txt'))
    const body = await r.json()
    return r.status === 501 && body.code === 501 && /names no sandbox/.test(body.message)
  })
  await check('kill', async () => { await sbx.kill(); return (await sbx.isRunning()) === false })
}
await rejects('unknown_404', () => Sandbox.connect('sbx_01m00000000000000000000000'), NotFoundError)
await rejects('bad_key_401', () => Sandbox.list({ apiKey: 'e2b_' + '0'.repeat(40) }).nextItems(), AuthenticationError)
done()
