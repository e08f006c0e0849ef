# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: the per-key rate limit (429 with Retry-After past the burst).

# ---- rate limit ----------------------------------------------------------------------------

s_rate_limit() {
  # 150 requests at once on a fresh key (bucket: 50/s, burst 100) must meet some 429s.
  local k i codes
  k=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
  for i in $(seq 1 150); do
    printf 'url = "%s/v1/sandboxes/sbx_00000000000000000000000000"\noutput = "/dev/null"\n' "$URL"
  done >"$T/rate.curl"
  curl -s -K "$T/rate.curl" -H "Authorization: Bearer $k" -w '%{http_code} %header{retry-after}\n' >"$T/rate.out" || true
  codes=$(awk '{print $1}' "$T/rate.out" | sort | uniq -c | tr '\n' ' ')
  check rate_limit.429 "status counts: $codes" grep -q '^429 [0-9]' "$T/rate.out"
  check rate_limit.burst_served "status counts: $codes" [ "$(grep -c '^404' "$T/rate.out")" -ge 90 ]
  api GET /v1/sandboxes/sbx_00000000000000000000000000
  check rate_limit.per_key "another key got $(snip)" [ "$ST" = 404 ]
}
