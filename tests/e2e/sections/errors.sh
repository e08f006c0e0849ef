# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: errors a user can meet (auth, unknown ids, other projects, bad creates, wrong
# methods), each with its status and code, and that a refused request changes nothing.

# ---- 7. errors ------------------------------------------------------------------------------

s_errors() {
  KEY='' api GET /v1/sandboxes
  expect_error errors.no_auth_401 401 unauthorized
  check errors.no_auth_www_authenticate "WWW-Authenticate: '$(header WWW-Authenticate)'" \
    grep -qiE '^WWW-Authenticate: *Bearer' "$RESPH"
  KEY=b3os_sk_00000000000000000000000000000000 api GET /v1/sandboxes
  expect_error errors.unknown_key_401 401 unauthorized
  check errors.unknown_key_www_authenticate "WWW-Authenticate: '$(header WWW-Authenticate)'" \
    grep -qiE '^WWW-Authenticate: *Bearer' "$RESPH"
  KEY=not-a-key api GET /v1/sandboxes
  expect_error errors.malformed_key_401 401 unauthorized
  api GET /v1/sandboxes/sbx_00000000000000000000000000
  expect_error errors.unknown_sandbox_404 404 sandbox_not_found
  check errors.server_timing_on_errors "Server-Timing: '$(header Server-Timing)'" \
    grep -qiE '^Server-Timing:.*total;dur=[0-9.]+' "$RESPH"
  api GET /v1/sandboxes/not-an-id
  expect_error errors.malformed_sandbox_id_404 404 sandbox_not_found
  KEY=$OTHER api GET "/v1/sandboxes/$SBX"
  expect_error errors.other_project_get_404 404 sandbox_not_found
  KEY=$OTHER run_exec "$SBX" '{"cmd":"true"}'
  expect_error errors.other_project_exec_404 404 sandbox_not_found
  KEY=$OTHER api GET "/v1/sandboxes/$SBX/files?path=/etc/hostname"
  expect_error errors.other_project_file_404 404 sandbox_not_found
  KEY=$OTHER api DELETE "/v1/sandboxes/$SBX"
  expect_error errors.other_project_delete_404 404 sandbox_not_found
  KEY=$OTHER api GET /v1/sandboxes
  check errors.other_project_list "$(snip)" okj 200 'any(.data[]; .id == "'"$SBX"'") | not'
  api GET "/v1/sandboxes/$SBX"
  check errors.other_project_changed_nothing "$(snip)" [ "$(j .status)" = running ]

  # A deleted sandbox cannot run commands.
  local gone
  create_sandbox '{}'
  gone=$CID
  if [ -n "$gone" ] && delete_sandbox "$gone"; then
    run_exec "$gone" '{"cmd":"true"}'
    expect_error errors.exec_deleted_409 409 sandbox_not_running
  else
    fail errors.exec_deleted_409 "could not create and delete a sandbox: $(snip)"
  fi

  # Bad creates change nothing: no record, no container.
  local before_ids before_runsc after_ids after_runsc
  api GET '/v1/sandboxes?limit=100'
  before_ids=$(j '[.data[].id] | sort | join(",")')
  before_runsc=$(runsc_list | sort | tr '\n' ,)

  apij POST /v1/sandboxes '{"template": "base",'
  expect_error errors.invalid_json_400 400 invalid_request
  apij POST /v1/sandboxes '["base"]'
  expect_error errors.non_object_400 400 invalid_request
  apij POST /v1/sandboxes '{"template":"base","bogus_field":1}'
  expect_error errors.unknown_field_400 400 invalid_request bogus_field
  apij POST /v1/sandboxes '{"timeout_s":0}'
  expect_error errors.timeout_s_0_400 400 invalid_request timeout_s
  apij POST /v1/sandboxes '{"vcpu":9}'
  expect_error errors.vcpu_9_400 400 invalid_request vcpu
  apij POST /v1/sandboxes '{"env":{"B3OS_X":"1"}}'
  expect_error errors.env_reserved_400 400 invalid_request B3OS_
  # Admission: a sandbox larger than the host (memory_mib past its memory less the reserve, a
  # disk_gib past its free data disk) is refused, and nothing is made. Two such creates once
  # answered 201 on a 24 GiB node.
  local host_mib free_gib before_n
  host_mib=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  free_gib=$(df -BG --output=avail "$T/data" | tail -n 1 | tr -dc 0-9)
  api GET '/v1/sandboxes?limit=100'
  before_n=$(j '.data | length')
  if [ "$host_mib" -lt 64512 ]; then
    apij POST /v1/sandboxes '{"memory_mib": 65536, "vcpu": 8, "disk_gib": 1}'
    expect_error errors.memory_past_host_503 503 capacity_unavailable "memory_mib 65536"
  else
    skip errors.memory_past_host_503 "this host has $host_mib MiB: a 64 GiB sandbox fits it"
  fi
  if [ "${free_gib:-0}" -lt 250 ]; then
    apij POST /v1/sandboxes '{"disk_gib": 256}'
    expect_error errors.disk_past_free_503 503 capacity_unavailable "disk_gib 256"
  else
    skip errors.disk_past_free_503 "the data disk has $free_gib GiB free: 256 GiB fits it"
  fi
  api GET '/v1/sandboxes?limit=100'
  check errors.admission_made_nothing "before $before_n, after $(j '.data | length')" [ "$(j '.data | length')" = "$before_n" ]
  # env and secrets are bounded in all (64 KiB of names and values), not only per value: 250
  # values of 4,000 characters were accepted, a megabyte in every record. 20 are 80 KB (a
  # body of one argument under the kernel's 128 KiB, for curl).
  local big_env
  big_env=$(jq -nc '[range(20) | {key: "V\(.)", value: ("x" * 4000)}] | from_entries | {env: .}')
  apij POST /v1/sandboxes "$big_env"
  expect_error errors.env_total_400 400 invalid_request "env: names and values longer than 64 KiB"
  apij POST /v1/sandboxes "$(jq -c '{secrets: .env}' <<<"$big_env")"
  expect_error errors.secrets_total_400 400 invalid_request "secrets: names and values longer than 64 KiB"
  local md17 long
  md17=$(jq -nc '[range(17) | {key: "k\(.)", value: "v"}] | from_entries | {metadata: .}')
  apij POST /v1/sandboxes "$md17"
  expect_error errors.metadata_17_keys_400 400 invalid_request metadata
  apij POST /v1/sandboxes '{"metadata":{"a b":"x"}}'
  expect_error errors.metadata_key_space_400 400 invalid_request metadata
  long=$(head -c 501 /dev/zero | tr '\0' x)
  apij POST /v1/sandboxes "{\"metadata\":{\"k\":\"$long\"}}"
  expect_error errors.metadata_value_501_400 400 invalid_request metadata
  api POST /v1/sandboxes -H 'Content-Type: text/plain' --data-binary '{"template":"base"}'
  expect_error errors.text_plain_415 415 unsupported_media_type
  {
    printf '{"metadata":{"k":"'
    head -c $((1100 * 1024)) /dev/zero | tr '\0' x
    printf '"}}'
  } >"$T/huge.json"
  api POST /v1/sandboxes -H 'Content-Type: application/json' --data-binary @"$T/huge.json"
  expect_error errors.json_over_1MiB_413 413 payload_too_large
  apij POST /v1/sandboxes '{"template":"no-such-template"}'
  expect_error errors.unknown_template_404 404 template_not_found
  # This suite's b3osd runs with --network off (tests/e2e/network.sh tests the networks).
  apij POST /v1/sandboxes '{"egress":{"mode":"public"}}'
  expect_error errors.egress_public_without_networks_503 503 product_unavailable 'network off'
  apij POST /v1/sandboxes '{"api":{"scopes":["infer:write"]}}'
  expect_error errors.api_unknown_scope_400 400 invalid_request api.scopes
  apij POST /v1/sandboxes '{"api":{"scopes":["infer:run"],"spend_cap_usd":-1}}'
  expect_error errors.api_negative_cap_400 400 invalid_request api.spend_cap_usd
  apij POST /v1/sandboxes '{"api":{"scopes":["root:all"]}}'
  expect_error errors.api_unknown_scope_400 400 invalid_request root:all
  apij POST /v1/sandboxes '{"ports":[{"port":0,"public":true}]}'
  expect_error errors.ports_out_of_range_400 400 invalid_request 'ports[0].port'
  apij POST /v1/sandboxes '{"egress":{"mode":"allowlist","allow":["192.0.2.0/24"]}}'
  expect_error errors.egress_allowlist_without_networks_503 503 product_unavailable 'network off'
  apij POST /v1/sandboxes '{"egress":{"mode":"allowlist","allow":["10.0.0.0/8"]}}'
  expect_error errors.egress_denied_range_403 403 egress_denied 'egress.allow[0]'
  apij POST /v1/sandboxes '{"egress":{"mode":"allowlist","allow":["Example.com"]}}'
  expect_error errors.egress_bad_entry_400 400 invalid_request 'egress.allow[0]'
  apij POST /v1/sandboxes '{"snapshot":"snp_00000000000000000000000000"}'
  expect_error errors.snapshot_unknown_404 404 snapshot_not_found

  apij POST "/v1/sandboxes/$SBX/fork" '{}'
  expect_error errors.fork_409 409 fork_unavailable
  apij POST "/v1/sandboxes/$SBX/fork" '{"count":0}'
  expect_error errors.fork_count_0_400 400 invalid_request count
  KEY=$OTHER apij POST "/v1/sandboxes/$SBX/fork" '{}'
  expect_error errors.other_project_fork_404 404 sandbox_not_found
  KEY=$OTHER api POST "/v1/sandboxes/$SBX/pause"
  expect_error errors.other_project_pause_404 404 sandbox_not_found
  KEY=$OTHER api POST "/v1/sandboxes/$SBX/snapshot"
  expect_error errors.other_project_snapshot_404 404 sandbox_not_found
  api POST /v1/sandboxes/sbx_00000000000000000000000000/pause
  expect_error errors.pause_unknown_404 404 sandbox_not_found
  api GET /v1/snapshots/snp_00000000000000000000000000
  expect_error errors.snapshot_get_unknown_404 404 snapshot_not_found
  apij POST /v1/infer/chat/completions '{"messages":[{"role":"user","content":"hi"}]}'
  expect_error errors.infer_no_model_503 503 product_unavailable "--model"
  api GET /mcp
  check errors.mcp_get_405 "HTTP $ST, Allow: '$(header Allow)'" bash -c "[ $ST = 405 ] && grep -qi '^Allow: POST, DELETE' '$RESPH'"
  api GET /mcp/anything
  expect_error errors.under_mcp_404 404 not_found
  run_exec sbx_00000000000000000000000000 '{"cmd":"true"}'
  expect_error errors.exec_unknown_404 404 sandbox_not_found
  api GET /v1/no-such-route
  expect_error errors.unknown_route_404 404 not_found
  api PATCH /v1/sandboxes
  expect_error errors.wrong_method_405 405 method_not_allowed
  check errors.wrong_method_allow_header "Allow: '$(header Allow)'" grep -qi '^Allow: .*POST' "$RESPH"
  api PUT "/v1/sandboxes/$SBX"
  expect_error errors.wrong_method_sandbox_405 405 method_not_allowed

  api GET '/v1/sandboxes?limit=100'
  after_ids=$(j '[.data[].id] | sort | join(",")')
  after_runsc=$(runsc_list | sort | tr '\n' ,)
  check errors.no_new_sandbox "before [$before_ids] after [$after_ids]" [ -n "$after_ids" -a "$before_ids" = "$after_ids" ]
  check errors.no_new_container "before [$before_runsc] after [$after_runsc]" [ "$before_runsc" = "$after_runsc" ]
  check errors.only_expected_containers "runsc list: [$after_runsc], want [$SBX,]" [ "$after_runsc" = "$SBX," ]
}
