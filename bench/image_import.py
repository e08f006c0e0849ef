#!/usr/bin/env python3
"""Image import (daemon/image, docs/image-import.md) against plain `tar -x` of the same layer
contents, in the same run: a docker-save tarball (uncompressed layer, as `docker save` writes
it) and an OCI layout with a gzip layer, both made by tests/fixtures/make_image.py from one
directory (the `base` template's root if it is there, else a generated tree of ~100 MB).

Ours is build/bin/b3os-image-import ARCHIVE DEST (the whole import: reading the archive and its
metadata, digests and diff_ids, limits, the writes); the baseline is GNU tar extracting the layer
blob, taken out of the archive beforehand (`tar -x --numeric-owner -f LAYER -C DEST`, with -z for
gzip), as root, so both keep owners and modes. Runs alternate, the destination is removed and the
disk synced between runs (untimed), the page cache stays warm for both. Medians of --runs.
Usage (root): bench/image_import.py [--bin build/bin] [--runs 5] [--source DIR] [--work DIR]
(--work /dev/shm takes the disk out of the figures: what is left is CPU, ours and tar's.)
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAKE_IMAGE = os.path.join(ROOT, "tests", "fixtures", "make_image.py")
BASE = "/var/lib/b3os/templates/base/rootfs"
MB = 1000 * 1000


def generated_tree(path, total=100 * MB):
    """A deterministic tree: many small files and a few large ones, like a root filesystem."""
    rnd = random.Random(21)
    written = 0
    i = 0
    while written < total:
        d = os.path.join(path, f"d{i % 40}", f"s{i % 7}")
        os.makedirs(d, exist_ok=True)
        size = rnd.choice([200, 1500, 4000, 12000, 60000]) if i % 500 else 2 * MB
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(rnd.randbytes(size // 2) + bytes(size - size // 2))  # half compressible
        written += size
        i += 1
    return path


def layer_blob(archive, dest):
    """Copies the archive's one layer blob out to `dest` (the baseline's input)."""
    with tarfile.open(archive) as t:
        names = [m for m in t.getmembers() if m.isfile() and (m.name.endswith("layer.tar") or
                                                              (m.name.startswith("blobs/") and m.size > 1 << 20))]
        with t.extractfile(names[0]) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    return os.path.getsize(dest)


def timed(cmd, dest):
    shutil.rmtree(dest, ignore_errors=True)
    os.mkdir(dest)
    os.sync()
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"image_import: {' '.join(cmd)} failed: {r.stderr.strip()}")
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--source", help=f"directory to make the image of (default {BASE} if present, else generated)")
    ap.add_argument("--work", default="/var/tmp", help="where the archives and the extractions go")
    args = ap.parse_args()
    tool = os.path.join(args.bin, "b3os-image-import")
    if not os.access(tool, os.X_OK):
        sys.exit(f"image_import: {tool} is missing (ninja -C build b3os-image-import)")

    work = tempfile.mkdtemp(prefix="b3os-image-bench-", dir=args.work)
    try:
        source = args.source or (BASE if os.path.isdir(BASE) else generated_tree(os.path.join(work, "tree")))
        cases = [("docker-save, uncompressed", ["--format", "docker"], []),
                 ("OCI layout, gzip", ["--format", "oci", "--gzip"], ["-z"])]
        dest = os.path.join(work, "dest")
        rows = []
        for label, fmt, tar_flags in cases:
            archive = os.path.join(work, "image.tar")
            subprocess.run([sys.executable, MAKE_IMAGE, archive, "--layer", source, *fmt], check=True)
            blob = os.path.join(work, "layer")
            stored = layer_blob(archive, blob)
            with tarfile.open(blob) as t:
                members = t.getmembers()
            raw = sum(m.size for m in members)  # file bytes in the layer
            ours, base = [], []
            for _ in range(args.runs):
                ours.append(timed([tool, archive, dest], dest))
                base.append(timed(["tar", "-x", "--numeric-owner", *tar_flags, "-f", blob, "-C", dest], dest))
            rows.append((label, os.path.getsize(archive), stored, raw, len(members),
                         statistics.median(ours), statistics.median(base)))
            os.unlink(archive)
            os.unlink(blob)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"image import of {source} into {args.work}: {os.cpu_count()} cores, {args.runs} runs, medians")
    print(f"{'case':26} {'archive MB':>10} {'entries':>8} {'ours s':>7} {'ours MB/s':>9} "
          f"{'tar -x s':>8} {'tar MB/s':>8} {'ratio':>6}")
    for label, size, stored, raw, entries, o, b in rows:
        print(f"{label:26} {size / MB:10.1f} {entries:8d} {o:7.2f} {raw / MB / o:9.1f} "
              f"{b:8.2f} {raw / MB / b:8.1f} {o / b:6.2f}")
    print("MB/s: file bytes in the layer per second; ratio: our time over tar's")


if __name__ == "__main__":
    main()
