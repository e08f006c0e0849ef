#!/usr/bin/env python3
"""Proves the build enforces the module arrows (docs/design.md): for each module, a file that
includes a header of a module it must not use fails to compile with that module's own flags,
and one that includes a header it may use compiles. Reads BUILD/compile_commands.json.

Usage: tests/layering_check.py [BUILD_DIR]   (default: build)
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

# module library -> (a source file of it, headers it may include, headers it must not)
RULES = {
    "b3os_common": ("common/error.cc", ["common/result.h"], ["protocol/frame.h", "daemon/sys/process.h"]),
    "b3os_sys": ("daemon/sys/process.cc", ["common/result.h"], ["daemon/store/store.h", "daemon/runtime/runtime.h"]),
    "b3os_image": ("daemon/image/image.cc", ["common/result.h"], ["daemon/sys/process.h", "daemon/sandbox/service.h"]),
    "b3os_store": ("daemon/store/sqlite_store.cc", ["common/money.h"], ["daemon/runtime/runtime.h", "daemon/sandbox/service.h"]),
    "b3os_objstore": ("daemon/objstore/objstore.cc", ["common/result.h", "daemon/image/digest.h"],
                      ["daemon/store/store.h", "daemon/sandbox/service.h", "daemon/http/server.h"]),
    "b3os_cluster": ("daemon/cluster/membership.cc", ["daemon/store/store.h"],
                     ["daemon/sandbox/service.h", "daemon/runtime/runtime.h", "daemon/http/server.h"]),
    "b3os_runtime": ("daemon/runtime/runsc.cc", ["daemon/sys/process.h"],
                     ["daemon/store/store.h", "daemon/agentlink/channel.h", "daemon/sandbox/service.h"]),
    "b3os_net": ("daemon/net/policy.cc", ["daemon/sys/process.h"],
                 ["daemon/store/store.h", "daemon/runtime/runtime.h", "daemon/sandbox/service.h", "daemon/agentlink/channel.h"]),
    "b3os_agentlink": ("daemon/agentlink/channel.cc", ["protocol/frame.h"],
                       ["daemon/store/store.h", "daemon/runtime/runtime.h"]),
    "b3os_sandbox": ("daemon/sandbox/lifecycle.cc", ["daemon/runtime/runtime.h", "daemon/store/store.h", "daemon/net/network.h",
                                                     "daemon/objstore/transfer.h"],
                     ["daemon/gateway/gateway.h", "daemon/api/api.h", "daemon/http/server.h"]),
    "b3os_gateway": ("daemon/gateway/gateway.cc", ["daemon/store/store.h", "daemon/agentlink/channel.h"],
                     ["daemon/sandbox/service.h", "daemon/api/api.h", "daemon/runtime/runsc.h", "daemon/http/server.h"]),
    "b3os_http": ("daemon/http/server.cc", ["daemon/sys/deadline_stream.h"],
                  ["daemon/sandbox/service.h", "daemon/gateway/gateway.h"]),
    "b3os_preview": ("daemon/preview/preview.cc", ["daemon/sandbox/service.h", "daemon/http/server.h"],
                     ["daemon/api/api.h", "daemon/gateway/gateway.h"]),
    "b3os_template": ("daemon/template/service.cc", ["daemon/sandbox/service.h", "daemon/image/image.h",
                                                     "daemon/objstore/transfer.h"],
                      ["daemon/api/api.h", "daemon/http/server.h", "daemon/gateway/gateway.h", "daemon/mcp/server.h"]),
    "b3os_mcp": ("daemon/mcp/server.cc", ["daemon/sandbox/service.h", "daemon/http/server.h"],
                 ["daemon/api/api.h", "daemon/gateway/gateway.h"]),
    "b3os_e2b": ("daemon/e2b/control.cc", ["daemon/sandbox/service.h", "daemon/http/server.h"],
                 ["daemon/api/api.h", "daemon/gateway/gateway.h", "daemon/mcp/server.h"]),
    "b3os_router": ("daemon/router/router.cc", ["daemon/http/server.h", "daemon/store/store.h", "daemon/cluster/signature.h"],
                    ["daemon/sandbox/service.h", "daemon/api/api.h", "daemon/runtime/runtime.h"]),
    "b3os_api": ("daemon/api/api.cc", ["daemon/sandbox/service.h", "daemon/gateway/gateway.h"], []),
    "b3os_agent_core": ("agent/http_head.cc", ["agent/request.h"], ["daemon/agentlink/channel.h", "protocol/frame.h"]),
    "b3os_cli_core": ("cli/args.cc", ["common/result.h"], ["daemon/store/store.h", "daemon/sandbox/service.h"]),
}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)
    by_file = {os.path.relpath(c["file"], root): c for c in commands}
    # A unity build compiles a module's sources through generated files that #include them:
    # each source takes the flags of the unity file that holds it.
    for c in commands:
        if "/Unity/unity_" in c["file"] and os.path.exists(c["file"]):
            with open(c["file"]) as f:
                for line in f:
                    if line.startswith("#include "):
                        by_file.setdefault(os.path.relpath(line.split('"')[1], root), c)
    failures = 0
    probes = []  # (module, header, want_ok, flags, directory)
    for module, (source, allowed, forbidden) in RULES.items():
        entry = by_file.get(source)
        if entry is None:
            print(f"FAIL {module}: {source} is not in {build}/compile_commands.json")
            failures += 1
            continue
        args = shlex.split(entry["command"])
        flags = [a for a in args if a.startswith(("-I", "-isystem", "-std=", "-D"))]
        # -isystem takes its path as the next argument
        for i, a in enumerate(args):
            if a == "-isystem" and i + 1 < len(args):
                flags += [a, args[i + 1]]
        probes += [(module, h, True, flags, entry["directory"]) for h in allowed]
        probes += [(module, h, False, flags, entry["directory"]) for h in forbidden]

    with tempfile.TemporaryDirectory() as tmp:
        def compile_probe(n):
            module, header, want_ok, flags, directory = probes[n]
            probe = os.path.join(tmp, f"probe{n}.cc")
            with open(probe, "w") as f:
                f.write(f'#include "{header}"\n')
            return subprocess.run(["g++", *flags, "-fsyntax-only", probe], cwd=directory, capture_output=True, text=True)

        # One compiler per core: the checks are independent, and the suite's time is CI's.
        with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
            results = list(ex.map(compile_probe, range(len(probes))))
    checked = len(probes)
    for (module, header, want_ok, _, _), r in zip(probes, results):
        ok = r.returncode == 0
        if ok != want_ok:
            failures += 1
            why = "compiled, but it runs against the arrows" if ok else "did not compile: " + r.stderr.strip()[:300]
            print(f"FAIL {module} including {header}: {why}")
        elif not want_ok and "No such file" not in r.stderr:
            failures += 1
            print(f"FAIL {module} including {header}: refused, but not for the layering: {r.stderr.strip()[:300]}")
    print(f"layering: {checked - failures} of {checked} include checks as the arrows say")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
