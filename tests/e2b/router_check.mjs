// The unmodified e2b SDK through b3os-router (tests/cluster/cluster.sh runs it): creates
// placed on the cluster's nodes, envd requests relayed to the node holding the sandbox (they
// carry its token, not a key), the other router reaching the same sandbox, errors in E2B's
// shape, and signed URLs (which name no sandbox: a node is asked which of its sandboxes signed).
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
  // A signed URL names no sandbox: the router asks the nodes which sandbox signed it, and
  // relays to that one. Written through one router, read through the other; a forged one is
  // 401 in E2B's shape.
  await check('signed_urls', async () => {
    const form = new FormData()
    form.append('file', new Blob(['through a signed URL and a router']), 'signed.txt')
    const put = await fetch(await sbx.uploadUrl('/workspace/signed.txt'), { method: 'POST', body: form })
    const down = await sbx.downloadUrl('/workspace/signed.txt')
    const got = await fetch(down.replace(process.env.E2B_SANDBOX_URL, other))
    const forged = await fetch(down.replace(/signature=v1_[^&]*/, 'signature=v1_forged'))
    const fbody = await forged.json()
    return put.ok && got.ok && (await got.text()) === 'through a signed URL and a router' &&
      forged.status === 401 && fbody.code === 401 && /not that of a running sandbox/.test(fbody.message)
  })
  // Forged URLs cannot take the nodes' CPU through a router: each client gets 20 a second
  // (429 past that, in E2B's shape), and a real URL works again a second later.
  await check('signed_urls_limited_per_client', async () => {
    const down = await sbx.downloadUrl('/workspace/signed.txt')
    const forged = down.replace(/signature=v1_[^&]*/, 'signature=v1_forged')
    const codes = await Promise.all(Array.from({ length: 40 }, () => fetch(forged).then(async (r) => { await r.arrayBuffer(); return r.status })))
    await new Promise((r) => setTimeout(r, 1500))
    const again = await fetch(down)
    const n429 = codes.filter((c) => c === 429).length
    return n429 >= 15 && codes.every((c) => c === 401 || c === 429) && again.ok &&
      (await again.text()) === 'through a signed URL and a router'
  })
  await check('kill', async () => { await sbx.kill(); return (await sbx.isRunning()) === false })
}
await rejects('unknown_404', () => Sandbox.connect('sbx_01m00000000000000000000000'), NotFoundError)
await rejects('bad_key_401', () => Sandbox.list({ apiKey: 'e2b_' + '0'.repeat(40) }).nextItems(), AuthenticationError)
done()
