#!/usr/bin/env python3
"""No path-based syscall on a tree a tenant wrote (docs/templates.md, "What runs where").

b3osd runs as root; a template's root, a build's root on its disk, an unpacked tree may hold
symlinks to anywhere on the host. A call that takes a path (chmod, chown, std::ofstream,
fs::permissions, fs::create_directories, fs::copy_file, ...) follows them. Under daemon/template,
daemon/objstore, daemon/sandbox and daemon/image, such a call whose path names a tenant's root
(an expression mentioning rootfs, root, disk_root, unpacked, or a path inside a root such as
"/workspace", "/tmp", "/etc") must not appear outside the one module that does these
operations beneath a directory fd (daemon/image/root_ops.cc) and the image importer's own fd
based code (layer.cc, tree.cc). A line that makes the root's own directory, a path b3osd chose
that no tenant wrote, says so with a comment holding "ours:" and why. Fails naming each line.

Usage: tests/root_ops_check.py [--self-test]
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRS = ["daemon/template", "daemon/objstore", "daemon/sandbox", "daemon/image"]
ALLOWED = {"daemon/image/root_ops.cc", "daemon/image/layer.cc", "daemon/image/tree.cc"}
# Calls that take a path and follow a symlink at it (or anywhere on the way).
CALL = re.compile(r"(?<![\w:.])(?:::)?(chmod|chown|lchown|truncate|mkdir|mknod|creat|utimes?)\s*\("
                  r"|std::ofstream\b|std::fstream\b|fs::(permissions|create_directories|create_directory|copy_file|copy|"
                  r"create_symlink|resize_file|last_write_time)\s*\(")
# What names a tenant's tree: a root's path, or a path inside a root.
TENANT = re.compile(r"\brootfs\b|\broot\b|\bdisk_root\b|\bparent_rootfs\b|\bunpacked\b|\"/rootfs|"
                    r"\"/(workspace|tmp|etc|root|\.b3os)[\"/]")


def violations(path, text):
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        code, _, comment = line.partition("//")
        if CALL.search(code) and TENANT.search(code) and "ours:" not in comment:
            out.append(f"{path}:{n}: {line.strip()}")
    return out


def scan():
    found = []
    for d in DIRS:
        for name in sorted(os.listdir(os.path.join(ROOT, d))):
            rel = f"{d}/{name}"
            if not name.endswith((".cc", ".h")) or rel in ALLOWED:
                continue
            with open(os.path.join(ROOT, rel)) as f:
                found += violations(rel, f.read())
    return found


def self_test():
    # The shapes this check exists for, each of which must be found, and fd-based code that
    # must not be.
    bad = ['  ::chmod((root + "/workspace").c_str(), 01777);',
           '  std::ofstream(root + "/etc/resolv.conf").flush();',
           '  fs::copy_file(context, root + "/.b3os-context.tar", ec);',
           '  fs::create_directories(rootfs + "/proc", ec);',
           '  fs::permissions(disk_root + "/tmp", fs::perms::all);']
    good = ['  if (::fchmod(d.get(), mode) != 0) return fail(host_error("root: chmod of " + quote(rel), errno));',
            '  std::ofstream(cfg_.data_dir + "/template-uploads/" + u.id + ".json") << meta;',
            '  // ::chmod((root + "/workspace").c_str(), 01777); in a comment',
            '  fs::create_directory(root, ec);  // ours: the root of the disk, made empty here']
    missed = [b for b in bad if not violations("x", b)]
    wrong = [g for g in good if violations("x", g)]
    for m in missed:
        print(f"FAIL self-test: not found: {m.strip()}")
    for w in wrong:
        print(f"FAIL self-test: found in fd-based or unrelated code: {w.strip()}")
    return not missed and not wrong


def main():
    ok = self_test()
    if "--self-test" in sys.argv:
        return 0 if ok else 1
    found = scan()
    for v in found:
        print(f"FAIL {v}\n  a path-based call on a tenant's tree: do it beneath the root's fd (daemon/image/root_ops.h)")
    if ok and not found:
        print(f"root_ops_check: no path-based call on a tenant's tree under {', '.join(DIRS)}")
    return 0 if ok and not found else 1


if __name__ == "__main__":
    sys.exit(main())
