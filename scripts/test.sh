#!/usr/bin/env bash
# The second README command: the whole test suite. Installs what the tests need, builds,
# builds (or reuses) the base template, then runs unit, integration, e2e, reliability and
# fuzz tests.
# Every skip is printed with its reason. Exit status: 0 only if nothing failed.
#
# Env: B3OS_FUZZ_SECONDS (per fuzz target, default 10; 0 skips fuzzing),
#      B3OS_E2E_BIG=0 skips the 1 GiB file round trip, B3OS_RELIABILITY=0 the reliability suite,
#      B3OS_TEST_BUDGET (seconds for the whole run, default 5000).
#
# Every step runs under its own time limit, and all of them under the run's budget: a step that
# hangs is killed (its process group: the daemons it started go with it, and its EXIT trap
# cleans up what it started in sessions of its own, such as sandboxes' shims) and FAILs saying
# so, and a step the budget leaves no time for FAILs as "not run". CI gives the run 90 minutes and
# keeps no output from a run it had to kill: the run must end, with its summary, before that.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
results=()
failed=0
step_start=$start
budget=${B3OS_TEST_BUDGET:-5000}
bounded() {  # seconds command...: the command under min(seconds, what is left of the budget)
  local want=$1; shift
  local left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -le 0 ]; then
    echo "NOT RUN: the run's budget of $budget s is spent"; return 124
  fi
  local t=$(( want < left ? want : left )) rc=0
  timeout -k 30 "$t" "$@" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "TIMED OUT: killed after $t s (its limit $want s, the run's budget left $left s): $*"
  fi
  return "$rc"
}
# A suite that ends at an unexpected error outside any check (tests/e2e/lib.sh, e2e_guard) writes
# where to $B3OS_TEST_ABORT_FILE; the step's summary line then says so.
abort_dir=$(mktemp -d /tmp/b3os-test-aborts.XXXXXX)
trap 'rm -rf "$abort_dir"' EXIT
step() {
  echo; echo "=== $1 (at $(( $(date +%s) - start )) s)"; step_start=$(date +%s)
  export B3OS_TEST_ABORT_FILE=$abort_dir/step.$step_start.$RANDOM
}
record() {  # name status(0 ok, 77 skip, else fail) [reason]; says how long its step took
  local took="($(( $(date +%s) - step_start )) s)" aborted=
  [ ! -s "${B3OS_TEST_ABORT_FILE:-}" ] || aborted=": ended early, at an unexpected error outside any check: $(paste -sd '|' "$B3OS_TEST_ABORT_FILE")"
  if [ "$2" = 0 ]; then results+=("PASS $1 $took$aborted");
  elif [ "$2" = 77 ]; then results+=("SKIP $1: $3");
  else results+=("FAIL $1 $took$aborted"); failed=1; fi
}

step "dependencies"
bounded 1800 ./scripts/install-deps.sh || { echo "installing dependencies failed"; exit 1; }

step "node packages: the official MCP SDK and Inspector for the MCP tests and the recipes' MCP tabs; kubernetes-models for the manifests; s3rver for the cluster's object store; the e2b SDK"
if command -v npm >/dev/null; then
  for d in tests/mcp cookbook tests/kubernetes tests/cluster tests/e2b; do
    (cd "$d" && bounded 600 npm ci --no-audit --no-fund --loglevel=error) ||
      echo "npm ci in $d failed: the client checks that need it will say SKIP"
  done
else
  echo "npm is not installed: the MCP client checks will say SKIP"
fi

step "build"
bounded 2400 ./scripts/build.sh || { echo "build failed"; exit 1; }

FUZZ_TARGETS="agent_fuzz frame_fuzz target_fuzz spec_fuzz http_request_fuzz http_head_fuzz peek_fuzz http_guard_fuzz allow_fuzz dns_fuzz preview_fuzz jsonrpc_fuzz users_fuzz image_fuzz e2b_fuzz"
secs=${B3OS_FUZZ_SECONDS:-10}

step "template base"
bounded 1200 ./templates/base/build.sh /var/lib/b3os/templates/base || { echo "template build failed"; exit 1; }
export B3OS_TEMPLATES_DIR=/var/lib/b3os/templates

step "unit tests (the store's Postgres leg runs in the next step; here it says it is skipped)"
bounded 600 ./build/bin/unit_tests --gtest_brief=1
record unit $?

step "store: the same store suite against Postgres 15 (a temporary server on a unix socket)"
bounded 600 ./tests/store/pg_suite.sh "$root/build/bin"
record store-postgres $?

step "layering: an #include against the module arrows fails to compile (docs/design.md)"
bounded 900 python3 tests/layering_check.py build
record layering $?

step "tenant trees: no path-based call (chmod, chown, ofstream, create_directories...) on a root a tenant wrote, outside daemon/image/root_ops"
bounded 60 python3 tests/root_ops_check.py
record root-ops $?

step "docs: openapi.yaml's error codes agree with docs/api.md and common/error.cc"
bounded 120 python3 tests/e2e/openapi_check.py check-docs
record openapi-docs $?

step "integration: agent and shim in runsc"
B3OS_BUILD_DIR=$root/build/bin bounded 600 ./tests/integration/agent_runsc.sh
record integration-agent $?

step "integration: sandbox service on runsc"
bounded 600 ./build/bin/integration_tests --gtest_brief=1
record integration-service $?

step "end to end: b3osd over HTTP"
if [ -x tests/e2e/e2e.sh ]; then
  # 20 create/delete cycles in its leak section, not 50: the reliability suite's leak part
  # below runs 150 of them with finer checks, and CI's time is shared.
  B3OS_BIN=$root/build/bin B3OS_E2E_CYCLES=${B3OS_E2E_CYCLES:-20} bounded 1200 ./tests/e2e/e2e.sh
  record e2e $?
else
  record e2e 1
fi

step "end to end: the fork best-of-N cookbook recipe"
B3OS_BIN=$root/build/bin bounded 600 ./tests/e2e/cookbook_fork.sh
record cookbook-fork $?

step "end to end: both cookbook recipes with the model gateway (scripted model fixture)"
B3OS_BIN=$root/build/bin bounded 900 ./tests/e2e/cookbook_model.sh
record cookbook-model $?

step "end to end: the model gateway's caps, keys, errors and restarts (scripted model fixture)"
B3OS_BIN=$root/build/bin bounded 900 ./tests/e2e/gateway.sh
record gateway $?

step "end to end: egress public and allowlist against a fake internet the test builds (tests/net)"
B3OS_BIN=$root/build/bin bounded 900 ./tests/e2e/network.sh
record network $?

step "end to end: templates users build (apt from the fake internet, files, context, start and ready, forks, versions, projects, bad specs, hostile images, a b3osd killed mid-build)"
B3OS_BIN=$root/build/bin bounded 900 ./tests/e2e/templates.sh
record templates $?

step "end to end: ports and preview URLs (tokens, forks, pause, WebSocket, SSE; egress deny)"
B3OS_BIN=$root/build/bin bounded 600 ./tests/e2e/ports.sh
record ports $?

step "end to end: MCP at /mcp with real clients (official SDK over HTTP and stdio, Inspector CLI, protocol edges)"
B3OS_BIN=$root/build/bin bounded 600 ./tests/e2e/mcp.sh
record mcp $?

step "end to end: the unmodified e2b SDK against b3osd (control plane, commands, files, watches, signed URLs, pause and connect, errors)"
B3OS_BIN=$root/build/bin bounded 600 ./tests/e2b/e2b.sh
record e2b $?

step "end to end: operations (configuration file, JSON logs and request ids, /metrics scraped by a real Prometheus, b3os status)"
B3OS_BIN=$root/build/bin bounded 600 ./tests/e2e/operations.sh
record operations $?

step "kubernetes: deploy/kubernetes against the published schemas (kubernetes-models) and its own references"
if [ -d tests/kubernetes/node_modules/kubernetes-models ]; then
  bounded 300 node tests/kubernetes/validate.mjs
  record kubernetes $?
else
  record kubernetes 77 "tests/kubernetes/node_modules is missing (npm ci failed or npm is not installed; see above)"
fi

step "cluster: Postgres 15, three b3osd nodes and two b3os-routers on this machine (placement, routing, signed internal ports, idempotency and caps across nodes, a node and a router killed)"
B3OS_BIN=$root/build/bin bounded 1500 ./tests/cluster/cluster.sh
record cluster $?

step "end to end: the Debian package (lintian, systemd-analyze verify, apt install and purge in a fresh Debian 12 root)"
bounded 600 ./tests/e2e/package.sh
record package $?

# The reliability suite (tests/reliability/README.md): each part starts its own b3osd and is
# bounded in time; B3OS_RELIABILITY=0 skips it (said in the summary).
for part in slow_clients net_caps hostile faults load leaks; do
  step "reliability: $part"
  if [ "${B3OS_RELIABILITY:-1}" = 0 ]; then
    record "reliability-$part" 77 "B3OS_RELIABILITY=0"
  else
    # Sized for CI's budget (each part's own defaults are longer, for a run by hand): 60 s of
    # load by 20 clients, and 100 leak cycles, still find a leak of one fd or one mount a cycle
    # (or one in every 100).
    args=()
    case $part in
      load) args=(--duration 60 --warmup 10) ;;
      leaks) args=(--cycles 100) ;;
    esac
    B3OS_BIN=$root/build/bin bounded 900 ./tests/reliability/$part.sh ${args[@]+"${args[@]}"}
    record "reliability-$part" $? "its SKIP line above says why"
  fi
done

step "fuzz (${secs}s per target)"
if [ "$secs" = 0 ]; then
  record fuzz 77 "B3OS_FUZZ_SECONDS=0"
else
  fuzz_ok=0
  # In the foreground: built beside the suites (at the lowest priority) it still slowed the
  # load-sensitive reliability parts and was not done by the end. -O1 with line tables only:
  # ASan's reports keep their file:line, and the build takes half the time of -O2 -g. Each
  # target compiles only the sources it fuzzes (tests/CMakeLists.txt): 81 s, not 7 minutes.
  mkdir -p build-fuzz
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DB3OS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" >/dev/null &&
    bounded 1200 ninja -C build-fuzz -j"$(nproc)" $FUZZ_TARGETS >build-fuzz/build.log 2>&1 ||
    { echo "building the fuzz targets failed:"; tail -40 build-fuzz/build.log; fuzz_ok=1; }
  if [ $fuzz_ok = 0 ]; then
    # One target per core at a time (libFuzzer runs one thread): each still gets its seconds.
    for f in $FUZZ_TARGETS; do
      (
        corpus=build-fuzz/corpus/$f
        mkdir -p "$corpus"
        seeds=tests/fuzz/seeds/$f
        if timeout -k 10 $(( secs + 300 )) ./build-fuzz/bin/$f -max_total_time="$secs" -print_final_stats=0 "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) \
             >build-fuzz/$f.log 2>&1; then
          echo "$f: $(grep -E '^Done' build-fuzz/$f.log)"
        else
          echo "$f: FAILED"; tail -30 build-fuzz/$f.log
        fi
      ) >build-fuzz/$f.out 2>&1 &
      while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
    done
    wait
    for f in $FUZZ_TARGETS; do
      cat build-fuzz/$f.out
      grep -q "^$f: FAILED" build-fuzz/$f.out && fuzz_ok=1
    done
  fi
  record fuzz $fuzz_ok
fi

echo
echo "=== summary ($(( $(date +%s) - start )) s)"
printf '%s\n' "${results[@]}"
exit $failed
