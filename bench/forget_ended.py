#!/usr/bin/env python3
"""What forgetting ended sandboxes holds the store for: a SQLite database of b3os's own schema
(made by `b3os keys create`, its indexes included) filled with --rows ended sandboxes in
--projects projects, then b3os's statements (read from daemon/store/row_codec.h) run as b3osd
runs them, 5,000 records a statement, against the baseline of a plain DELETE of 5,000 rows by
id in the same database; and a minute's turn with nothing to forget (every record in its time,
one project that had a sandbox end looked at, at its count). Each statement holds the store's
lock for its whole time (a request waits that long at most). Medians.

Usage: bench/forget_ended.py [--rows 200000] [--projects 20] [--bin build/bin]
"""

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 5000


def sql_of(name):
    text = open(os.path.join(HERE, "..", "daemon", "store", "row_codec.h")).read()
    m = re.search(name + r' =\s*((?:"[^"]*"\s*)+);', text)
    return re.sub(r"\$(\d)", r"?\1", "".join(re.findall(r'"([^"]*)"', m.group(1))))


def fill(db, rows, projects, first):
    cols = [r[1] for r in db.execute("PRAGMA table_info(sandboxes)")]
    notnull = {r[1]: r[3] for r in db.execute("PRAGMA table_info(sandboxes)")}
    values = []
    for i in range(rows):
        v = {c: ("" if notnull[c] else None) for c in cols}
        v.update(id=f"sbx_{first + i:026d}", project_id=f"prj_{i % projects}", state="stopped",
                 created_ms=1_000_000 + i, stopped_ms=2_000_000 + i, stop_reason="deleted")
        for c in cols:
            if v[c] == "" and c.endswith(("_ms", "_mib", "_gib", "_s", "vcpu", "forkable", "open_ports", "_micros")):
                v[c] = 0
        values.append(tuple(v[c] for c in cols))
    db.executemany(f"INSERT INTO sandboxes({','.join(cols)}) VALUES ({','.join('?' * len(cols))})", values)
    db.commit()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--projects", type=int, default=20)
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="b3os-forget-")
    subprocess.run([f"{a.bin}/b3os", "keys", "create", "--project", "bench", "--data-dir", tmp],
                   check=True, stdout=subprocess.DEVNULL)
    db = sqlite3.connect(f"{tmp}/b3os.db")
    before, past = sql_of("kForgetEndedBeforeSql"), sql_of("kForgetEndedPastSql")
    fill(db, a.rows, a.projects, 0)
    # b3os: everything past its time, a batch at a time, as b3osd's turn does.
    ours = []
    while True:
        t = time.perf_counter()
        n = db.execute(before, (10**15, BATCH)).rowcount
        db.commit()
        if n == 0:
            break
        ours.append((time.perf_counter() - t) * 1000)
    # The baseline: the same rows again, deleted 5,000 at a time by id.
    fill(db, a.rows, a.projects, 0)
    raw = []
    for first in range(0, a.rows, BATCH):
        ids = [f"sbx_{i:026d}" for i in range(first, min(first + BATCH, a.rows))]
        t = time.perf_counter()
        db.execute(f"DELETE FROM sandboxes WHERE id IN ({','.join('?' * len(ids))})", ids)
        db.commit()
        raw.append((time.perf_counter() - t) * 1000)
    # The steady state: nothing to forget among --rows ended records kept (each project at its
    # count, none past its time): what every minute's turn costs.
    fill(db, a.rows, a.projects, 0)
    per_project = a.rows // a.projects
    idle = []
    for _ in range(5):
        t = time.perf_counter()
        db.execute(before, (0, BATCH))
        db.execute(past, ("prj_0", per_project, BATCH))
        idle.append((time.perf_counter() - t) * 1000)
    # One project one past its count (a sandbox ended in it): what that turn costs.
    over = []
    for _ in range(5):
        t = time.perf_counter()
        db.execute(past, ("prj_0", per_project - 1, BATCH))
        db.commit()
        over.append((time.perf_counter() - t) * 1000)
        per_project -= 1
    subprocess.run(["rm", "-rf", tmp])
    m_ours, m_raw = statistics.median(ours), statistics.median(raw)
    print(f"forgetting {a.rows} ended sandboxes of {a.projects} projects (SQLite {sqlite3.sqlite_version}), "
          f"batches of {BATCH}, medians (ms):")
    print(f"  b3os statement      {m_ours:8.1f} per batch ({len(ours)} batches, slowest {max(ours):.1f})")
    print(f"  DELETE ... IN (ids) {m_raw:8.1f} per batch (baseline)   ratio {m_ours / m_raw:.2f}x")
    print(f"  a turn with nothing to forget among {a.rows}: {statistics.median(idle):.2f}")
    print(f"  a turn that forgets one record past its project's count: {statistics.median(over):.2f}")


if __name__ == "__main__":
    sys.exit(main())
