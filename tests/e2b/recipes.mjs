// Both cookbook recipes' flows a second time, through the unmodified e2b SDK (issue 24): create,
// write files, run the tests, read the results back. The model's part is the scripted model's
// answers (tests/fixtures/model_script, the test fixture the recipes' own tests use), written
// where the recipe's agent would write them: what is under test here is the SDK against b3osd,
// not the gateway (tests/e2e/cookbook_model.sh drives that).
// Prints PASS/FAIL lines for tests/e2b/e2b.sh; "#" lines are information.
//
//   B3OS_API_URL=http://127.0.0.1:PORT E2B_API_URL=... E2B_SANDBOX_URL=... E2B_API_KEY=e2b_... \
//     node recipes.mjs
import { readFileSync } from 'node:fs'
import { Sandbox, CommandExitError } from 'e2b'
import { makeChecks } from './checks.mjs'

const ROOT = new URL('../../', import.meta.url)
const read = (p) => readFileSync(new URL(p, ROOT), 'utf8')
const API = process.env.B3OS_API_URL
const KEY = process.env.E2B_API_KEY
const { check, done } = makeChecks('recipes')

// The first ```python block of a scripted model answer.
function answer(file) {
  const m = read(`tests/fixtures/model_script/${file}`).match(/```python\n([\s\S]*?)```/)
  if (!m) throw new Error(`no python block in ${file}`)
  return m[1]
}

// unittest -v in /workspace: {ran, passed} (a failing run is a result, not an error).
async function unittest(box, module) {
  let out
  try {
    const r = await box.commands.run(`cd /workspace && python3 -m unittest -v ${module} 2>&1`)
    out = r.stdout
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
    out = e.stdout
  }
  const ran = Number((out.match(/^Ran (\d+) tests?/m) || [0, -1])[1])
  const passed = out.split('\n').filter((l) => / \.\.\. ok$/.test(l)).length
  return { ran, passed }
}

const made = []
try {
  // ---- sandbox-model-writes-tested-code ----
  const dir = 'cookbook/sandbox-model-writes-tested-code/'
  let box
  await check('model.create_without_internet', async () => {
    box = await Sandbox.create('base', { allowInternetAccess: false, metadata: { recipe: 'sandbox-model-writes-tested-code' } })
    made.push(box)
    return (await box.getInfo()).state === 'running'
  })
  if (box) {
    await check('model.write_files', async () => {
      await box.files.write([
        { path: '/workspace/task.md', data: read(dir + 'task.md') },
        { path: '/workspace/test_solution.py', data: read(dir + 'test_solution.py') },
      ])
      return (await box.files.exists('/workspace/task.md')) && (await box.files.exists('/workspace/test_solution.py'))
    })
    // A TEST-NET address (nothing answers there): the sandbox's egress is closed in any case.
    await check('model.probe_blocked', async () =>
      (await box.commands.run('curl -s -m 3 -o /dev/null http://198.51.100.7/ && echo reached || echo blocked')).stdout === 'blocked\n')
    await check('model.tests_fail_without_solution', async () => (await unittest(box, 'test_solution')).passed === 0)
    const solution = answer('30-agent-parse-duration.txt')
    await check('model.tests_pass_with_the_answer', async () => {
      await box.files.write('/workspace/solution.py', solution)
      const r = await unittest(box, 'test_solution')
      console.log(`# model recipe: ${r.passed} of ${r.ran} tests pass with the scripted answer`)
      return r.ran === 7 && r.passed === 7
    })
    await check('model.solution_read_back', async () => (await box.files.read('/workspace/solution.py')) === solution)
  }

  // ---- sandbox-fork-best-of-n-fixes ----
  // The source is forkable, which E2B's create cannot say: made through b3os's API with the
  // same e2b_ key, then driven by the SDK.
  const fdir = 'cookbook/sandbox-fork-best-of-n-fixes/'
  let src
  await check('fork.source_created_forkable', async () => {
    const res = await fetch(`${API}/v1/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-Key': KEY, 'Content-Type': 'application/json' },
      body: JSON.stringify({ template: 'base', forkable: true, egress: { mode: 'deny' }, metadata: { recipe: 'sandbox-fork-best-of-n-fixes' } }),
    })
    const body = await res.json()
    if (res.status !== 201) throw new Error(`HTTP ${res.status} ${JSON.stringify(body).slice(0, 200)}`)
    src = await Sandbox.connect(body.id)
    made.push(src)
    return true
  })
  if (src) {
    const buggy = read(fdir + 'slug.py')
    let before
    await check('fork.tests_fail_in_source', async () => {
      await src.files.write([
        { path: '/workspace/slug.py', data: buggy },
        { path: '/workspace/test_slug.py', data: read(fdir + 'test_slug.py') },
      ])
      before = await unittest(src, 'test_slug')
      console.log(`# fork recipe: ${before.passed} of ${before.ran} tests pass in the source`)
      return before.ran === 7 && before.passed < 7
    })
    let forks = []
    await check('fork.into_three', async () => {
      forks = await Sandbox.fork(src.sandboxId, { count: 3 })
      made.push(...forks)
      return forks.length === 3 && new Set(forks.map((f) => f.sandboxId)).size === 3
    })
    if (forks.length === 3) {
      const fixes = [answer('10-fork-slug-first-round.txt'), answer('20-fork-slug-second-round.txt'),
        answer('20-fork-slug-second-round.txt')]
      const results = []
      await check('fork.one_fix_each', async () => {
        for (let i = 0; i < 3; i++) {
          // Each fork has the source's files (its disk is a copy), then its own fix.
          if ((await forks[i].files.read('/workspace/slug.py')) !== buggy) return false
          await forks[i].files.write('/workspace/slug.py', fixes[i])
          results.push(await unittest(forks[i], 'test_slug'))
        }
        console.log(`# fork recipe: the forks pass ${results.map((r) => `${r.passed}/${r.ran}`).join(', ')}`)
        return results[0].passed < 7 && results[0].passed > before.passed && results[1].passed === 7 && results[2].passed === 7
      })
      await check('fork.source_unchanged', async () => {
        const again = await unittest(src, 'test_slug')
        return (await src.files.read('/workspace/slug.py')) === buggy && again.passed === before.passed
      })
    }
  }
} finally {
  for (const b of made) await b.kill().catch(() => {})
}
done()
