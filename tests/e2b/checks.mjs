// PASS/FAIL lines for tests/e2b/e2b.sh, shared by the SDK's checkers: check(name, fn) passes
// unless fn throws or answers false; rejects(name, fn, cls, more) passes when fn throws a cls
// for which more(e) holds; done() prints "# NAME: N failed" (e2b.sh's sign the checker
// finished) and exits 1 on a failure.
export function makeChecks(suite) {
  let failed = 0
  const pass = (name) => console.log(`PASS ${name}`)
  const fail = (name, why) => { failed++; console.log(`FAIL ${name}: ${String(why).replace(/\s+/g, ' ').slice(0, 400)}`) }
  async function check(name, fn) {
    try {
      const r = await fn()
      if (r === false) fail(name, 'the check did not hold')
      else pass(name)
    } catch (e) {
      fail(name, `${e?.name}: ${e?.message}`)
    }
  }
  async function rejects(name, fn, cls, more = () => true) {
    try {
      await fn()
      fail(name, 'no error')
    } catch (e) {
      if (e instanceof cls && more(e)) pass(name)
      else fail(name, `${e?.name}: ${e?.message}`)
    }
  }
  function done() {
    console.log(`# ${suite}: ${failed} failed`)
    process.exit(failed ? 1 : 0)
  }
  return { check, rejects, fail, done }
}
