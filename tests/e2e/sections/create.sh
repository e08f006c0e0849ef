# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# The first checks of tests/e2e/e2e.sh: create the main sandbox, its fields and values, the
# templates list. Sets SBX (global) for the sections after it.

# ---- 1. create ------------------------------------------------------------------------------

# jq: the names of the sandbox object's fields that are missing (spec: docs/api.md).
JQ_MISSING='
  def o(x): if (x|type) == "object" then x else {} end;
  . as $d
  | [ ("id","object","status","host_id","template","snapshot","vcpu","memory_mib","disk_gib",
       "timeout_s","on_idle","expires_at","env","secret_names","ports","api","egress","forkable",
       "created_at","started_at","paused_at","stopped_at","stop_reason","stop_message","usage",
       "metadata") | select(. as $f | $d | has($f) | not) ]
  + [ ("id","name") | select(. as $f | o($d.template) | has($f) | not) | "template." + . ]
  + [ ("scopes","spend_cap_usd","connections") | select(. as $f | o($d.api) | has($f) | not) | "api." + . ]
  + [ ("mode","allow") | select(. as $f | o($d.egress) | has($f) | not) | "egress." + . ]
  + [ ("vcpu_ms","gib_ms") | select(. as $f | o($d.usage) | has($f) | not) | "usage." + . ]
  | join(" ")'

# jq: the fields of a fresh default sandbox whose values are wrong.
JQ_BAD_VALUES='
  def t: sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601;
  def ts: type == "string" and test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$");
  [ {k: "id", ok: (.id | type == "string" and test("^sbx_[0-9a-z]{26}$"))},
    {k: "object", ok: (.object == "sandbox")},
    {k: "status", ok: (.status == "running")},
    {k: "host_id", ok: (.host_id | type == "string" and length > 0)},
    {k: "template", ok: (.template == {"id": "tpl_base", "name": "base"})},
    {k: "snapshot", ok: (.snapshot == null)},
    {k: "vcpu", ok: (.vcpu == 1)},
    {k: "memory_mib", ok: (.memory_mib == 512)},
    {k: "disk_gib", ok: (.disk_gib == 1)},
    {k: "timeout_s", ok: (.timeout_s == 300)},
    {k: "on_idle", ok: (.on_idle == "stop")},
    {k: "env", ok: (.env == {})},
    {k: "secret_names", ok: (.secret_names == [])},
    {k: "ports", ok: (.ports == [])},
    {k: "api", ok: (.api == {"scopes": [], "spend_cap_usd": null, "connections": [], "spent_usd": 0})},
    {k: "egress", ok: (.egress == {"mode": "deny", "allow": []})},
    {k: "forkable", ok: (.forkable == false)},
    {k: "created_at", ok: (.created_at | ts)},
    {k: "started_at", ok: (.started_at | ts)},
    {k: "expires_at", ok: ((.expires_at | ts) and ((.expires_at | t) - (.created_at | t) | . >= 299 and . <= 301))},
    {k: "paused_at", ok: (.paused_at == null)},
    {k: "stopped_at", ok: (.stopped_at == null)},
    {k: "stop_reason", ok: (.stop_reason == null)},
    {k: "stop_message", ok: (.stop_message == null)},
    {k: "usage", ok: ((.usage.vcpu_ms | type) == "number" and (.usage.gib_ms | type) == "number")},
    {k: "metadata", ok: (.metadata == {})} ]
  | map(select(.ok | not) | .k) | join(" ")'

# s_create: creates the suite's main sandbox ($SBX, used by most sections) and checks the
# sandbox object. Called directly, not by run_section: without that sandbox the suite cannot
# go on, so a failure here ends the run.
s_create() {
  local missing bad
  create_sandbox '{"template":"base"}'
  SBX=$CID
  if [ -z "$SBX" ]; then
    fail create.status "want 201, got $(snip)"
    die "cannot go on without a sandbox"
  fi
  pass create.status
  missing=$(j "$JQ_MISSING")
  check create.fields "missing: $missing" [ -z "$missing" ]
  check create.timing "no numeric timing.total_ms: $(snip)" jt '(.timing.total_ms | type) == "number"'
  bad=$(j "$JQ_BAD_VALUES")
  check create.values "wrong: $bad; $(snip)" [ -z "$bad" ]
  check create.server_timing "Server-Timing: $(header Server-Timing)" \
    grep -qiE '^Server-Timing:.*total;dur=[0-9.]+' "$RESPH"
  api GET /v1/templates
  check templates.base_ready "$(snip)" okj 200 '.object == "list" and
    any(.data[]; .id == "tpl_base" and .name == "base" and .object == "template" and .status == "ready")'
  api GET "/v1/sandboxes/$SBX"
  missing=$(j "$JQ_MISSING")
  check get.fields "HTTP $ST, missing: $missing" [ "$ST" = 200 -a -z "$missing" -a "$(j .id)" = "$SBX" -a "$(j .status)" = running ]
}
