#!/usr/bin/env python3
"""Templates users build (docs/templates.md) against `base`, in one private b3osd with its
defaults (warm pool 2, fork pool 3, template checkpoints auto), medians of --runs:

  create          a non-forkable create: `base` (its warm pool) beside a template whose start
                  command (python3 -m http.server) is ready on its port, with warm_pool 2, and
                  the same template without a pool (its checkpoint restored)
  forkable create the same, forkable (never from a warm pool: `base` boots in a pooled
                  container or restores its checkpoint; the template restores its own)
  port            create answered -> the template's port answered from inside (first try?)
  rebuild         the same spec again: ready in (s)
  image import    a docker-save tarball of base's root through the API (upload, then the build
                  to ready), MB/s, beside `tar -x` of a plain tar of the same tree
  packages        (--mirror only) packages: [nodejs] on base, from a real Debian mirror

Usage (root): bench/templates.py [--runs N] [--mirror http://deb.debian.org/debian]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WEB = {"start": "cd /tmp && python3 -m http.server 8000", "ready": {"port": 8000, "timeout_s": 60}}
PORT_CHECK = ("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/', timeout=5).status)\"")


def wait_ready(c, name, timeout_s=600):
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        _, b = c.call("GET", f"/v1/templates/{name}")
        t = json.loads(b)
        st = t["build"]["status"]
        if st in ("ready", "failed"):
            if st == "failed":
                raise RuntimeError(f"{name}: {t['build']['error']}")
            return time.time() - t0
        time.sleep(0.1)
    raise RuntimeError(f"{name}: not ready in {timeout_s} s")


def build(c, spec):
    t0 = time.time()
    c.call("POST", "/v1/templates", spec)
    wait_ready(c, spec["name"])
    return time.time() - t0


def creates(c, d, template, runs, forkable, pool_wait):
    server, client = [], []
    for _ in range(runs):
        time.sleep(pool_wait)  # pools refill between a user's creates
        t0 = time.perf_counter()
        _, b = c.call("POST", "/v1/sandboxes", {"template": template, "forkable": forkable})
        client.append((time.perf_counter() - t0) * 1000)
        s = json.loads(b)
        server.append(s["timing"]["total_ms"])
        c.call("DELETE", f"/v1/sandboxes/{s['id']}")
    return statistics.median(server), statistics.median(client)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    ap.add_argument("--mirror", default="", help="a Debian mirror for the packages: [nodejs] build (skipped without)")
    args = ap.parse_args()
    med = statistics.median
    print(f"templates: {os.cpu_count()} cores, {args.runs} runs each, medians")
    with PrivateDaemon(args.bin, args.templates, ["--warm-pool", "2", "--fork-pool", "3",
                                                  "--template-checkpoints", "auto"]) as d:
        c = d.client
        for _ in range(300):  # base's checkpoint is built at start
            _, b = c.call("GET", "/v1/templates")
            if json.loads(b)["data"][0]["checkpoint"]["status"] != "building":
                break
            time.sleep(0.2)
        first = build(c, {"name": "web", **WEB, "warm_pool": 2})
        build(c, {"name": "web-nopool", **WEB})
        print(f"first build of `web` (no steps: base's root, a checkpoint with the server ready): {first:.1f} s")

        print(f"\n{'create (ms)':34} {'server':>8} {'client':>8} {'ratio to base':>14}")
        rows = {}
        for label, tpl, forkable in [("base, warm pool", "base", False), ("web, warm pool", "web", False),
                                     ("web-nopool, checkpoint restore", "web-nopool", False),
                                     ("base, forkable", "base", True), ("web, forkable (restore)", "web", True)]:
            rows[label] = creates(c, d, tpl, args.runs, forkable, 1.5)
        for label, (srv, cli) in rows.items():
            base = rows["base, forkable" if "forkable" in label else "base, warm pool"]
            print(f"{label:34} {srv:8.2f} {cli:8.2f} {cli / base[1]:13.2f}x")

        # The port answers at once: from create answered to the first GET served inside.
        lat, first_try = [], 0
        for _ in range(args.runs):
            time.sleep(1.5)
            t0 = time.perf_counter()
            _, b = c.call("POST", "/v1/sandboxes", {"template": "web"})
            s = json.loads(b)
            _, e = c.call("POST", f"/v1/sandboxes/{s['id']}/exec", {"cmd": PORT_CHECK})
            lat.append((time.perf_counter() - t0) * 1000)
            first_try += json.loads(e)["stdout"].strip() == "200"
            c.call("DELETE", f"/v1/sandboxes/{s['id']}")
        print(f"\nport 8000 served on the first try after create: {first_try}/{args.runs}; "
              f"create + that GET: {med(lat):.1f} ms")

        rebuild = [build(c, {"name": "web", **WEB, "warm_pool": 2}) for _ in range(5)]
        print(f"no-change rebuild, ready in: {med(rebuild):.2f} s (median of 5)")

        # Image import through the API against tar -x of the same tree.
        with tempfile.TemporaryDirectory(prefix="b3os-bench-img-") as tmp:
            root = os.path.join(args.templates, "base", "rootfs")
            img = os.path.join(tmp, "base.tar")
            subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "fixtures", "make_image.py"), "--format",
                            "docker", "--layer", root, img], check=True, stdout=subprocess.DEVNULL)
            plain = os.path.join(tmp, "plain.tar")
            subprocess.run(["tar", "-C", root, "-cf", plain, "."], check=True)
            size_mb = os.path.getsize(img) / 1e6
            api_s, tar_s = [], []
            for i in range(3):
                t0 = time.time()
                with open(img, "rb") as f:
                    _, b = c.call("POST", "/v1/templates/uploads", raw=f.read(), ctype="application/x-tar")
                up = json.loads(b)["id"]
                c.call("POST", "/v1/templates", {"name": f"img{i}", "image": {"upload": up}})
                wait_ready(c, f"img{i}")
                api_s.append(time.time() - t0)
                out = os.path.join(tmp, f"x{i}")
                os.mkdir(out)
                t0 = time.time()
                subprocess.run(["tar", "-C", out, "-xf", plain], check=True)
                tar_s.append(time.time() - t0)
                subprocess.run(["rm", "-rf", out])
                c.call("DELETE", f"/v1/templates/img{i}?force=true")
            print(f"image import, docker save of base ({size_mb:.0f} MB): API upload + build {med(api_s):.2f} s "
                  f"({size_mb / med(api_s):.0f} MB/s); tar -x {med(tar_s):.2f} s ({size_mb / med(tar_s):.0f} MB/s); "
                  f"ratio {med(api_s) / med(tar_s):.2f}x")

    if not args.mirror:
        print("packages: [nodejs]: skipped (give --mirror URL: it downloads from a Debian mirror)")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".list", delete=False) as f:
        f.write(f"deb {args.mirror} bookworm main\n")
        sources = f.name
    with PrivateDaemon(args.bin, args.templates, ["--network", "on", "--template-apt-sources", sources,
                                                  "--warm-pool", "0", "--fork-pool", "0"]) as d:
        t = build(d.client, {"name": "node", "packages": ["nodejs"]})
        _, b = d.client.call("GET", "/v1/templates/node")
        size = json.loads(b)["size_bytes"] / 1e6
        print(f"packages: [nodejs] on base from {args.mirror}: ready in {t:.1f} s, root {size:.0f} MB")
    os.unlink(sources)


if __name__ == "__main__":
    main()
