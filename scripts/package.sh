#!/usr/bin/env bash
# Builds the Debian package b3os_<version>_<arch>.deb from the project's build (build/bin; runs
# scripts/build.sh first only when a binary is missing) with debhelper: packaging/debian is the
# debian/ directory, run by dpkg-buildpackage in a staging tree under build/pkg/ that holds
# links to build/bin and copies of the packaged files (nothing is compiled there).
#
# Usage: scripts/package.sh [OUT_DIR]   (default build/; must be inside the project or /tmp)
# Prints the path of the .deb on its last line.
# Env: B3OS_PKG_VERSION=V packages as version V (a changelog entry for it is added in the
#      staging tree; the upgrade test uses it). Otherwise the version is CMakeLists.txt's
#      project(b3os VERSION ...), and packaging/debian/changelog must have an entry for it.
# Needs: debhelper, help2man, dpkg-dev (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

out=${1:-build}
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
case "$out/" in
  "$(pwd -P)"/* | /tmp/*) ;;
  *) echo "package: OUT_DIR must be inside $root or /tmp (got $out)" >&2; exit 2 ;;
esac
case "$out/" in
  "$(pwd -P)/build/pkg/"*) echo "package: OUT_DIR may not be build/pkg, the staging tree (wiped each run)" >&2; exit 2 ;;
esac

for t in dpkg-buildpackage dh help2man; do
  command -v "$t" >/dev/null || { echo "package: $t is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

version=$(sed -n 's/^project(b3os VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || { echo "package: no project(b3os VERSION ...) in CMakeLists.txt" >&2; exit 1; }
logged=$(dpkg-parsechangelog -l packaging/debian/changelog -S Version)
if [ -z "${B3OS_PKG_VERSION:-}" ] && [ "$logged" != "$version" ]; then
  echo "package: CMakeLists.txt says version $version but packaging/debian/changelog's last entry is $logged;" \
    "add an entry for $version at the top of packaging/debian/changelog" >&2
  exit 1
fi
pkg_version=${B3OS_PKG_VERSION:-$version}

bins=(b3osd b3os b3os-agent b3os-shim b3os-router)
for b in "${bins[@]}"; do
  if [ ! -x "build/bin/$b" ]; then
    echo "package: build/bin/$b is missing: running scripts/build.sh"
    ./scripts/build.sh
    break
  fi
done

stage=$root/build/pkg
src=$stage/b3os-$pkg_version
rm -rf "$stage"
mkdir -p "$src/build/bin" "$src/packaging" "$src/templates/base"
cp -a packaging/debian "$src/debian"
for b in "${bins[@]}"; do
  # A hard link when it can (b3osd is large); dh_install copies it and dh_strip strips the copy.
  ln "build/bin/$b" "$src/build/bin/$b" 2>/dev/null || cp -a "build/bin/$b" "$src/build/bin/$b"
done
cp -a packaging/b3osd.service packaging/b3osd.conf "$src/packaging/"
cp -a templates/base/build.sh "$src/templates/base/"
cp -a README.md docs "$src/"

if [ "$pkg_version" != "$logged" ]; then
  {
    printf 'b3os (%s) unstable; urgency=medium\n\n' "$pkg_version"
    printf '  * Built by scripts/package.sh with B3OS_PKG_VERSION=%s.\n\n' "$pkg_version"
    printf ' -- %s  %s\n\n' "$(dpkg-parsechangelog -l packaging/debian/changelog -S Maintainer)" "$(date -R)"
    cat packaging/debian/changelog
  } >"$src/debian/changelog"
fi

echo "package: building b3os $pkg_version in $src"
if ! (cd "$src" && dpkg-buildpackage -b -uc -us) >"$stage/build.log" 2>&1; then
  echo "package: dpkg-buildpackage failed; the end of $stage/build.log:" >&2
  tail -40 "$stage/build.log" >&2
  exit 1
fi
arch=$(dpkg --print-architecture)
deb=b3os_${pkg_version}_${arch}.deb
[ -f "$stage/$deb" ] || { echo "package: dpkg-buildpackage made no $deb; see $stage/build.log" >&2; exit 1; }
mv -f "$stage/$deb" "$out/$deb"
# The links to build/bin would keep a replaced binary's old copy on disk until the next run.
rm -rf "$src/build"
echo "$out/$deb"
