# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: create/delete cycles, then nothing of the run may be left: containers,
# processes, cgroups, mounts, run directories.

# ---- 15. leak check -------------------------------------------------------------------------

all_released() { [ -z "$(runsc_list)$(ls -A "$T/run/sandboxes" 2>/dev/null)" ]; }

s_leaks() {
  local i start ms ok=0 ids_file=$T/leak.ids left
  : >"$ids_file"
  start=$(now_ms)
  for i in $(seq 1 "$CYCLES"); do
    create_sandbox '{"metadata":{"batch":"leak"}}'
    if [ -z "$CID" ]; then
      fail leaks.cycle "create #$i: $(snip)"
      continue
    fi
    echo "$CID" >>"$ids_file"
    if delete_sandbox "$CID"; then ok=$((ok + 1)); else fail leaks.cycle "delete #$i: $(snip)"; fi
  done
  ms=$(($(now_ms) - start))
  info "$CYCLES create/delete cycles took $((ms / 1000)).$(printf %03d $((ms % 1000))) s ($((ms / CYCLES)) ms per cycle)"
  check leaks.cycles "$ok of $CYCLES cycles succeeded" [ "$ok" = "$CYCLES" ]
  # A delete answers once the sandbox is stopped; its container and files go just after.
  start=$(now_ms)
  eventually 60 all_released || true
  info "everything released $(($(now_ms) - start)) ms after the last delete answered"

  left=$(runsc_list | tr '\n' ' ')
  check leaks.no_containers "runsc list: $left" [ -z "${left// /}" ]
  left=""
  while read -r id; do
    left="$left$(pgrep -f "$id" | tr '\n' ' ' || true)"
  done <"$ids_file"
  check leaks.no_processes "processes naming the ids: $left" [ -z "${left// /}" ]
  left="$(pgrep -f "b3os-shim $T/" | tr '\n' ' ' || true)$(pgrep -f -- "--root $T/run/runsc" | tr '\n' ' ' || true)"
  check leaks.no_shim_or_runsc "processes of this run: $left" [ -z "${left// /}" ]
  left=""
  while read -r id; do left="$left$(cgroup_dirs "$id" | tr '\n' ' ')"; done <"$ids_file"
  check leaks.no_cgroups "left: $left" [ -z "${left// /}" ]
  left=$(grep -F -f "$ids_file" /proc/mounts | head -n 3 || true)
  check leaks.no_mounts "$left" [ -z "$left" ]
  left=$(ls -A "$T/run/sandboxes" 2>/dev/null | tr '\n' ' ')
  check leaks.run_dir_empty "$T/run/sandboxes: $left" [ -z "${left// /}" ]
}
