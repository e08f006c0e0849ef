#!/usr/bin/env bash
# End-to-end test of the Debian package (scripts/package.sh, packaging/):
#   - the .deb: its name, fields (Depends without runsc, Recommends runsc), contents, conffile;
#     lintian reports no error; systemd-analyze verify passes on its unit, and on the unit
#     scripts/setup.sh installs for the build tree where systemd runs;
#   - installed with `apt-get install ./b3os_*.deb` into a fresh Debian 12 root (a copy of the
#     base template's rootfs, a debootstrap minbase bookworm, without backports): the programs
#     run, `b3osd --check-config` accepts the installed configuration and refuses bad ones with
#     exit 2, the unit is enabled where systemd looks and verifies there; a purge removes it
#     and /etc/b3os but keeps /var/lib/b3os;
#   - the maintainer scripts against a stand-in systemctl (no systemd runs here): started on
#     install only with a recent runsc, try-restarted (never stopped) on upgrade, stopped on
#     remove.
# Network: apt in the copied root reaches deb.debian.org (the base template's sources.list);
# nothing else. The root's /proc and /dev are bind mounts, unmounted by the exit trap.
#
# Usage (as root, with the base template built):  tests/e2e/package.sh
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
# shellcheck disable=SC2016 # single-quoted $VAR, ${Field} and $(...) are for eval or dpkg-query
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
BASE_ROOTFS=$TEMPLATES/base/rootfs

E2E_NAME=package # lib.sh's die() names the suite with it
export E2E_NAME
[ "$(id -u)" = 0 ] || die "must run as root (chroot, mounts, dpkg in the copied root)"
for c in dpkg-buildpackage dh help2man lintian systemd-analyze chroot mount; do
  command -v "$c" >/dev/null || die "$c is not installed (scripts/install-deps.sh installs it)"
done
if [ ! -e "$TEMPLATES/base/.b3os-ready" ]; then
  echo "FAIL setup: the base template is not built at $TEMPLATES/base (no .b3os-ready);" \
    "build it with: templates/base/build.sh $TEMPLATES/base"
  exit 1
fi
T=$(mktemp -d /tmp/b3os-package.XXXXXX)
R=$T/root
E2E_RESULTS=$T/results
: >"$E2E_RESULTS"
SUITE_START=$(now_ms)

# ---- clean-up: end what runs in the root, unmount, and only then remove ---------------------

root_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$R" ] && echo "${p#/proc/}"
  done
  return 0
}
mounted_under() { awk -v r="$R" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo; }
cleanup_root() {
  local pids m
  [ -d "$R" ] || return 0
  pids=$(root_pids)
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086 # one pid a word
    kill $pids 2>/dev/null
    sleep 0.5
    pids=$(root_pids)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null
  fi
  for m in "$R/dev" "$R/proc"; do
    mountpoint -q "$m" && { umount -R "$m" 2>/dev/null || umount -lR "$m"; }
  done
  m=$(mounted_under)
  if [ -n "$m" ]; then
    echo "# still mounted under $R, so it is kept: $m"
    return 1
  fi
  rm -rf "$R"
}
# The suite's own stdout and stderr: a signal can land while run_to has them redirected to a
# log, and the traps must still print where the suite does.
exec 3>&1 4>&2
on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  exec 1>&3 2>&4
  e2e_aborted "$rc"
  if cleanup_root && [ "${B3OS_E2E_KEEP:-0}" != 1 ]; then rm -rf "$T"; else echo "# kept $T"; fi
  exit "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&4; exit 130' INT TERM

# inroot CMD...: CMD in the copied root, with a clean environment.
inroot() {
  chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}
# inroot_as_nobody CMD...: the same as user nobody (what needs no root is run without it).
inroot_as_nobody() {
  chroot --userspec=nobody:nogroup "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp LANG=C.UTF-8 "$@"
}
# run_to FILE CMD...: CMD's stdout and stderr into FILE; returns CMD's status.
run_to() {
  local f=$1
  shift
  "$@" >"$f" 2>&1
}
tail_of() { tail -c 600 "$1" | tr '\n' ' '; }
not_installed() { ! inroot dpkg-query -W -f='${db:Status-Status}\n' b3os 2>/dev/null | grep -qx installed; }

# ---- the package ---------------------------------------------------------------------------

VERSION=$(sed -n 's/^project(b3os VERSION \([0-9][0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
ARCH=$(dpkg --print-architecture)
DEB=$T/b3os_${VERSION}_${ARCH}.deb
UPGRADE_VERSION=$VERSION+upgradetest
UPGRADE_DEB=$T/b3os_${UPGRADE_VERSION}_${ARCH}.deb
info "b3os $VERSION ($ARCH), packaged from $ROOT/build/bin"

if ! run_to "$T/package.log" "$ROOT/scripts/package.sh" "$T" || [ ! -f "$DEB" ]; then
  fail package.build "scripts/package.sh $T: $(tail_of "$T/package.log")"
  exit 1
fi
pass package.build
if ! B3OS_PKG_VERSION=$UPGRADE_VERSION run_to "$T/package-upgrade.log" "$ROOT/scripts/package.sh" "$T"; then
  fail package.build_upgrade "B3OS_PKG_VERSION=$UPGRADE_VERSION scripts/package.sh: $(tail_of "$T/package-upgrade.log")"
fi

depends=$(dpkg-deb -f "$DEB" Depends)
recommends=$(dpkg-deb -f "$DEB" Recommends)
info "Depends: $depends"
info "Recommends: $recommends"
missing=()
for d in libc6 iproute2 nftables conntrack e2fsprogs debootstrap ca-certificates; do
  [[ ", $depends," == *", $d"[\ ,]* ]] || missing+=("$d")
done
check package.depends "Depends lacks ${missing[*]:-}" test ${#missing[@]} = 0
check package.runsc_not_depended "Depends names runsc: a bookworm without backports cannot meet it" \
  eval '[[ "$depends" != *runsc* ]]'
check package.runsc_recommended "Recommends is '$recommends'" eval '[[ "$recommends" == "runsc (>= "* ]]'

dpkg-deb -c "$DEB" | awk '{print $6}' | sed 's|^\./|/|' >"$T/contents"
missing=()
for f in /usr/sbin/b3osd /usr/bin/b3os /usr/lib/b3os/b3os-agent /usr/lib/b3os/b3os-shim \
  /lib/systemd/system/b3osd.service /etc/b3os/b3osd.conf /usr/share/b3os/templates/base/build.sh \
  /usr/share/doc/b3os/copyright /usr/share/doc/b3os/changelog.gz \
  /usr/share/man/man8/b3osd.8.gz /usr/share/man/man1/b3os.1.gz; do
  grep -qx "$f" "$T/contents" || missing+=("$f")
done
check package.contents "missing from the .deb: ${missing[*]:-}" test ${#missing[@]} = 0
# The configuration file names every long flag of b3osd (as a default line, or an "e.g." line
# for settings without a default), so it does not fall behind b3osd.
"$ROOT/build/bin/b3osd" --help | grep -oE '^ +--[a-z0-9-]+' | sed 's/^ *--//' |
  grep -vxE 'help|version|config|check-config|print-access' | sort >"$T/flags"
grep -oE '^#( +)?[a-z0-9-]+ =' "$ROOT/packaging/b3osd.conf" | sed 's/^# *//; s/ =$//' | sort -u >"$T/conf-keys"
check package.conf_names_every_flag "flags not in packaging/b3osd.conf: $(comm -23 "$T/flags" "$T/conf-keys" | tr '\n' ' ')" \
  eval '[ -s "$T/flags" ] && [ -z "$(comm -23 "$T/flags" "$T/conf-keys")" ]'
check package.conf_names_no_unknown_setting "names in packaging/b3osd.conf that are no flag: $(comm -13 "$T/flags" "$T/conf-keys" | tr '\n' ' ')" \
  eval '[ -z "$(comm -13 "$T/flags" "$T/conf-keys")" ]'

mkdir "$T/control"
dpkg-deb -e "$DEB" "$T/control"
check package.conffile "conffiles: $(tr '\n' ' ' <"$T/control/conffiles" 2>/dev/null)" \
  eval '[ "$(cat "$T/control/conffiles")" = /etc/b3os/b3osd.conf ]'

# lintian: no error. Its warnings and notes are listed as information.
lintian --pedantic --display-info "$DEB" >"$T/lintian.out" 2>"$T/lintian.err" || true
lint_errors=$(grep -c '^E: ' "$T/lintian.out" || true)
info "lintian: $(grep -c '^E: ' "$T/lintian.out" || true) errors, $(grep -c '^W: ' "$T/lintian.out" || true) warnings," \
  "$(grep -c '^[IP]: ' "$T/lintian.out" || true) notes"
sed 's/^/#   /' "$T/lintian.out"
check lintian.no_errors "$(grep '^E: ' "$T/lintian.out" | tr '\n' ' ')" test "$lint_errors" = 0
check lintian.ran "lintian printed to stderr: $(tail_of "$T/lintian.err")" \
  eval '! grep -v "running with root privileges" "$T/lintian.err" | grep -q .'

# systemd-analyze verify on the host, against the unpacked tree: the unit with its ExecStart
# pointing into that tree, the man page of its Documentation= found there.
mkdir "$T/unpacked"
dpkg-deb -x "$DEB" "$T/unpacked"
sed "s|/usr/sbin/b3osd|$T/unpacked/usr/sbin/b3osd|" "$T/unpacked/lib/systemd/system/b3osd.service" \
  >"$T/b3osd.service"
verify_rc=0
MANPATH=$T/unpacked/usr/share/man systemd-analyze verify "$T/b3osd.service" >"$T/verify-host.out" 2>&1 || verify_rc=$?
info "systemd-analyze verify (host, unpacked tree): exit $verify_rc, output: '$(tail_of "$T/verify-host.out")'"
check unit.verify_host "exit $verify_rc: $(tail_of "$T/verify-host.out")" \
  eval '[ "$verify_rc" = 0 ] && [ ! -s "$T/verify-host.out" ]'

# The unit scripts/setup.sh installs where systemd runs (scripts/start-service.sh): the same,
# on build/bin/b3osd (its man page is not installed: --man=no).
"$ROOT/scripts/start-service.sh" --print-unit >"$T/build-tree.service"
verify_rc=0
systemd-analyze verify --man=no "$T/build-tree.service" >"$T/verify-tree.out" 2>&1 || verify_rc=$?
check unit.verify_build_tree "exit $verify_rc: $(tail_of "$T/verify-tree.out")" \
  eval '[ "$verify_rc" = 0 ] && [ ! -s "$T/verify-tree.out" ] && grep -qx "ExecStart=\"$ROOT/build/bin/b3osd\" --quiet-key" "$T/build-tree.service"'

# ---- a fresh Debian 12 root ------------------------------------------------------------------

info "copying $BASE_ROOTFS to $R"
cp -a "$BASE_ROOTFS" "$R"
mount --bind /proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --make-rslave "$R/dev"
cp /etc/resolv.conf "$R/etc/resolv.conf"
cp "$DEB" "$R/tmp/"
[ -f "$UPGRADE_DEB" ] && cp "$UPGRADE_DEB" "$R/tmp/"
IDEB=/tmp/${DEB##*/}
IUPGRADE=/tmp/${UPGRADE_DEB##*/}
info "sources in the root: $(grep -hv '^#' "$R"/etc/apt/sources.list "$R"/etc/apt/sources.list.d/* 2>/dev/null | tr '\n' ' ')"

if ! run_to "$T/apt-update.log" inroot apt-get update; then
  reason="apt-get update in the copied root failed (deb.debian.org unreachable?): $(tail_of "$T/apt-update.log")"
  for c in install version check_config cli agent unit verify purge maint; do skip "chroot.$c" "$reason"; done
else
  # ---- install on a plain bookworm (no backports, no systemd running) ----------------------
  if run_to "$T/install.log" inroot apt-get install -y "$IDEB"; then
    pass chroot.install
  else
    fail chroot.install "apt-get install $IDEB: $(tail_of "$T/install.log")"
  fi
  grep -E '^(b3os|    )' "$T/install.log" | sed 's/^/#   postinst: /' || true
  check chroot.runsc_not_pulled "a runsc got installed: $(inroot dpkg-query -W runsc 2>&1)" \
    eval '! inroot dpkg-query -W -f="\${db:Status-Status}" runsc 2>/dev/null | grep -qx installed'
  check chroot.postinst_says_backports "the install's output does not say how to get runsc" \
    grep -q 'apt install -t bookworm-backports runsc' "$T/install.log"

  out=$(inroot_as_nobody b3osd --version 2>&1) || true
  check chroot.version "b3osd --version printed '$(tr "\n" " " <<<"$out")'" test "$out" = "b3osd $VERSION"

  # --check-config: no root needed, the installed file accepted, bad ones refused with 2.
  check_config() {  # NAME WANT_RC [ARGS...]: b3osd --check-config ARGS as nobody
    local name=$1 want=$2 rc=0
    shift 2
    inroot_as_nobody b3osd --check-config "$@" >"$T/$name.out" 2>"$T/$name.err" || rc=$?
    if [ "$rc" = "$want" ]; then
      pass "chroot.check_config.$name"
    else
      fail "chroot.check_config.$name" "exit $rc (want $want); stdout '$(tail_of "$T/$name.out")' stderr '$(tail_of "$T/$name.err")'"
    fi
  }
  check_config installed 0
  check chroot.check_config.installed_says_ok "stdout: '$(tail_of "$T/installed.out")'" \
    grep -qx 'b3osd: configuration OK' "$T/installed.out"
  check_config installed_explicit 0 --config /etc/b3os/b3osd.conf
  # Every default the file shows, uncommented, is a value b3osd accepts. (There is no file when
  # the install above failed, a FAIL already: sed must not end the suite there; check_config
  # then fails too, and the maintainer-script part below installs the package anew.)
  sed 's/^#\([a-z]\)/\1/' "$R/etc/b3os/b3osd.conf" >"$R/tmp/defaults.conf" || true
  check_config defaults_uncommented 0 --config /tmp/defaults.conf
  printf '%s\n' '# arrays for repeatable flags' 'dns-upstream = ["192.0.2.53", "192.0.2.54:53"]' \
    'mcp-allowed-origin = ["https://agents.example.com"]' 'warm-pool = 0' 'runsc-debug = true' \
    >"$R/tmp/arrays.conf"
  check_config arrays 0 --config /tmp/arrays.conf
  printf 'listen = "127.0.0.1:7070"\nno-such-setting = 1\n' >"$R/tmp/unknown.conf"
  check_config unknown_key 2 --config /tmp/unknown.conf
  check chroot.check_config.unknown_key_named "stderr: '$(tail_of "$T/unknown_key.err")'" \
    grep -q 'no-such-setting' "$T/unknown_key.err"
  printf 'warm-pool = "many"\n' >"$R/tmp/badvalue.conf"
  check_config bad_value 2 --config /tmp/badvalue.conf

  check chroot.cli_help "b3os --help failed" eval 'inroot_as_nobody b3os --help >/dev/null'
  check chroot.agent_shim "/usr/lib/b3os/b3os-agent or b3os-shim is missing or not executable" \
    test -x "$R/usr/lib/b3os/b3os-agent" -a -x "$R/usr/lib/b3os/b3os-shim"
  check chroot.template_script "/usr/share/b3os/templates/base/build.sh differs from templates/base/build.sh or is not executable" \
    eval 'test -x "$R/usr/share/b3os/templates/base/build.sh" && cmp -s "$R/usr/share/b3os/templates/base/build.sh" "$ROOT/templates/base/build.sh"'
  check chroot.unit_installed "/lib/systemd/system/b3osd.service differs from packaging/b3osd.service" \
    cmp -s "$R/lib/systemd/system/b3osd.service" "$ROOT/packaging/b3osd.service"
  check chroot.unit_enabled "no /etc/systemd/system/multi-user.target.wants/b3osd.service link" \
    eval '[ "$(readlink "$R/etc/systemd/system/multi-user.target.wants/b3osd.service")" = /lib/systemd/system/b3osd.service ]'
  check chroot.conffile_registered "dpkg does not list /etc/b3os/b3osd.conf as a conffile" \
    eval 'inroot dpkg-query -W -f="\${Conffiles}" b3os | grep -q "/etc/b3os/b3osd.conf "'

  # systemd and man-db in the root (a standard bookworm has both): the installed unit verifies
  # there as installed, and systemd's own lookup finds it enabled.
  if run_to "$T/install-systemd.log" inroot apt-get install -y --no-install-recommends systemd man-db; then
    verify_rc=0
    inroot systemd-analyze verify b3osd.service >"$T/verify.out" 2>&1 || verify_rc=$?
    info "systemd-analyze verify b3osd.service (in the root): exit $verify_rc, output: '$(tail_of "$T/verify.out")'"
    check chroot.unit_verify "exit $verify_rc: $(tail_of "$T/verify.out")" \
      eval '[ "$verify_rc" = 0 ] && [ ! -s "$T/verify.out" ]'
    enabled=$(inroot systemctl --root=/ is-enabled b3osd.service 2>&1 || true)
    check chroot.unit_found_enabled "systemctl --root=/ is-enabled b3osd.service: '$enabled'" test "$enabled" = enabled
  else
    fail chroot.unit_verify "apt-get install systemd man-db in the root: $(tail_of "$T/install-systemd.log")"
  fi

  # purge: the package and /etc/b3os go, the node's data stays.
  mkdir -p "$R/var/lib/b3os"
  echo keep >"$R/var/lib/b3os/b3os.db"
  if run_to "$T/purge.log" inroot apt-get purge -y b3os; then pass chroot.purge; else fail chroot.purge "$(tail_of "$T/purge.log")"; fi
  check chroot.purge.gone_from_dpkg "dpkg still lists b3os: $(inroot dpkg -l b3os 2>&1 | tail -n1)" \
    eval '! inroot dpkg-query -W b3os >/dev/null 2>&1'
  check chroot.purge.etc_gone "/etc/b3os is still there" test ! -e "$R/etc/b3os"
  check chroot.purge.files_gone "the unit, the enable link or b3osd is still there" \
    test ! -e "$R/lib/systemd/system/b3osd.service" -a ! -L "$R/etc/systemd/system/multi-user.target.wants/b3osd.service" -a ! -e "$R/usr/sbin/b3osd"
  check chroot.purge.data_kept "/var/lib/b3os/b3os.db was removed" test -f "$R/var/lib/b3os/b3os.db"
  check chroot.purge.says_data_kept "the purge's output does not mention /var/lib/b3os" grep -q '/var/lib/b3os' "$T/purge.log"

  # ---- maintainer scripts where systemd runs: a stand-in systemctl logs what they ask ---------
  mkdir -p "$R/run/systemd/system"
  mv "$R/usr/bin/systemctl" "$R/usr/bin/systemctl.real" 2>/dev/null || true
  cat >"$R/usr/bin/systemctl" <<'EOF'
#!/bin/sh
echo "$*" >>/var/log/systemctl.calls
case " $* " in
  *" is-enabled "*) echo enabled ;;
  *" is-active "*) exit 3 ;;
esac
exit 0
EOF
  chmod 0755 "$R/usr/bin/systemctl"
  calls() { tr '\n' ';' <"$R/var/log/systemctl.calls" 2>/dev/null; }
  reset_calls() { : >"$R/var/log/systemctl.calls"; }

  # bookworm's own runsc (no systrap): installed, not started.
  if run_to "$T/old-runsc.log" inroot apt-get install -y runsc; then
    info "bookworm's runsc: $(inroot dpkg-query -W -f='${Version}' runsc)"
    reset_calls
    run_to "$T/maint-old.log" inroot dpkg -i "$IDEB" || fail maint.old_runsc "dpkg -i: $(tail_of "$T/maint-old.log")"
    check maint.old_runsc_not_started "systemctl calls: $(calls)" eval '! grep -q " start b3osd" "$R/var/log/systemctl.calls"'
    check maint.old_runsc_says_too_old "the postinst does not say runsc is too old: $(tail_of "$T/maint-old.log")" \
      grep -q 'too old' "$T/maint-old.log"
    run_to "$T/maint-old-purge.log" inroot apt-get purge -y b3os runsc || fail maint.old_runsc "purge: $(tail_of "$T/maint-old-purge.log")"
  else
    skip maint.old_runsc_not_started "bookworm's runsc did not install: $(tail_of "$T/old-runsc.log")"
  fi

  # A recent runsc (a stand-in on PATH): the first install starts b3osd.
  printf '#!/bin/sh\necho "runsc version 0.0~20240729.0"\n' >"$R/usr/bin/runsc"
  chmod 0755 "$R/usr/bin/runsc"
  reset_calls
  if run_to "$T/maint-install.log" inroot dpkg -i "$IDEB"; then
    check maint.install_starts "systemctl calls: $(calls)" grep -qE '(^| )start b3osd.service$' "$R/var/log/systemctl.calls"
  else
    fail maint.install_starts "dpkg -i: $(tail_of "$T/maint-install.log")"
  fi

  # Upgrade: try-restart after the new files are in, nothing stopped before.
  if [ -f "$R$IUPGRADE" ]; then
    reset_calls
    if run_to "$T/maint-upgrade.log" inroot dpkg -i "$IUPGRADE"; then
      check maint.upgrade_try_restarts "systemctl calls: $(calls)" grep -qE '(^| )try-restart b3osd.service$' "$R/var/log/systemctl.calls"
      check maint.upgrade_never_stops "systemctl calls: $(calls)" eval '! grep -qE "(^| )(stop|start|restart) b3osd" "$R/var/log/systemctl.calls"'
      check maint.upgrade_version "installed: $(inroot dpkg-query -W -f='${Version}' b3os)" \
        eval '[ "$(inroot dpkg-query -W -f="\${Version}" b3os)" = "$UPGRADE_VERSION" ]'
    else
      fail maint.upgrade "dpkg -i $IUPGRADE: $(tail_of "$T/maint-upgrade.log")"
    fi
  else
    fail maint.upgrade "no $UPGRADE_DEB was built"
  fi

  # Remove: stopped, and the output says the sandboxes keep running.
  reset_calls
  if run_to "$T/maint-remove.log" inroot apt-get remove -y b3os; then
    check maint.remove_stops "systemctl calls: $(calls)" grep -qE '(^| )stop b3osd.service$' "$R/var/log/systemctl.calls"
    check maint.remove_says_sandboxes_run "output: $(tail_of "$T/maint-remove.log")" grep -q 'sandboxes keep running' "$T/maint-remove.log"
    check maint.remove_keeps_conffile "/etc/b3os/b3osd.conf is gone after a remove" test -f "$R/etc/b3os/b3osd.conf"
  else
    fail maint.remove_stops "apt-get remove: $(tail_of "$T/maint-remove.log")"
  fi
  # Reinstall after that remove: started again (the postinst sees the old version, as for an
  # upgrade, but b3osd was stopped, so a try-restart alone would leave it down).
  reset_calls
  if run_to "$T/maint-reinstall.log" inroot dpkg -i "$IUPGRADE"; then
    check maint.reinstall_after_remove_starts "systemctl calls: $(calls)" grep -qE '(^| )start b3osd.service$' "$R/var/log/systemctl.calls"
    check maint.reinstall_marker_gone "" test ! -e "$R/var/lib/b3os/.b3osd-removed"
  else
    fail maint.reinstall_after_remove_starts "dpkg -i: $(tail_of "$T/maint-reinstall.log")"
  fi
  if run_to "$T/maint-purge.log" inroot apt-get purge -y b3os; then
    check maint.purge "b3os still in dpkg, or /etc/b3os still there" eval 'not_installed && [ ! -e "$R/etc/b3os" ]'
  else
    fail maint.purge "apt-get purge: $(tail_of "$T/maint-purge.log")"
  fi
fi

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
ELAPSED=$(($(now_ms) - SUITE_START))
echo "passed $P, failed $F, skipped $S in $((ELAPSED / 1000)) s"
[ "$F" = 0 ] || exit 1
