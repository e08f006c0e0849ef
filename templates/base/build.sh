#!/usr/bin/env bash
# Builds the root filesystem of the `base` template: Debian 12 minbase with python3, curl,
# ca-certificates and procps. The result is cached: a finished build (marked by .b3os-ready)
# is reused, and a half-finished one is thrown away and built again.
# Usage: build.sh DEST_DIR   (DEST_DIR/rootfs is created)
set -euo pipefail
dest=${1:?usage: build.sh DEST_DIR}
mirror=${B3OS_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ -f "$dest/.b3os-ready" ]; then
  echo "template base: cached at $dest"
  exit 0
fi
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
echo "template base: debootstrap into $dest (about 3 minutes)"
debootstrap --variant=minbase --include=python3,curl,ca-certificates,procps \
  bookworm "$dest.tmp/rootfs" "$mirror" >"$dest.tmp/debootstrap.log" 2>&1 || {
  echo "template base: debootstrap failed, last lines of its log:" >&2
  tail -20 "$dest.tmp/debootstrap.log" >&2
  exit 1
}
root="$dest.tmp/rootfs"
# Keep the image small: no apt lists or caches, no docs.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
mkdir -p "$root/workspace" "$root/.b3os"
chmod 0777 "$root/workspace"
: >"$root/etc/machine-id"
echo sandbox >"$root/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
# A login shell that starts no process: E2B's SDK runs every command as `bash -l -c CMD`, and
# Debian's /etc/profile runs `id -u` (twice) and root's ~/.profile `mesg n`; in gVisor each
# process start costs tens of milliseconds, about 200 ms a command in all. bash knows the uid
# ($EUID), and mesg means something only on a terminal.
sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/g' "$root/etc/profile"
sed -i 's/^mesg n/[ -t 0 ] \&\& mesg n/' "$root/root/.profile"
if grep -q '"$(id -u)"' "$root/etc/profile" || grep -q '^mesg' "$root/root/.profile"; then
  echo "template base: the login profile still starts a process (Debian changed /etc/profile or ~/.profile?)" >&2
  exit 1
fi
du -sm "$root" | awk '{print "template base: " $1 " MB"}'
rm -rf "$dest"
mv "$dest.tmp" "$dest"
touch "$dest/.b3os-ready"
echo "template base: ready at $dest"
