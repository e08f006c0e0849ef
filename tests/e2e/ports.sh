#!/usr/bin/env bash
# End-to-end test of ports and their preview URLs (docs/ports.md) against a private b3osd:
#   - an app bound to 127.0.0.1 inside an egress-deny sandbox (no network at all), served
#     through its public URL; keep-alive, chunked, a 1 MiB POST, server-sent events, WebSocket;
#   - a private port: url null, reached only through a minted URL, refused once it expired;
#   - a browser's navigation to the URL redirected to it without the token (cookie set on the
#     way): the app never sees the token, in a target, a Cookie or a Referer; other clients
#     (curl, fetch, websocket) served the URL directly, as before;
#   - bad, missing and other ports' tokens refused, and the app's log shows it never saw them;
#     the token stripped from the query and from the Cookie header before the app sees them;
#   - only the host-bound __Host-b3os_token_<port> cookie counts: plain b3os_token_<port>
#     cookies (which a sibling host can toss onto the parent domain) are ignored and stripped,
#     an extra bogus cookie does not lock the owner out, and an app cannot set cookies named
#     like ours (its Set-Cookie headers are dropped);
#   - a fork gets its own host_id and tokens: its app answers only its own URL, the source's
#     token is refused on the fork's host (and the other way round);
#   - a snapshot restore: its own host_id and tokens, the app carried over in memory;
#   - b3osd SIGKILLed with a WebSocket open: the client's connection ends, the URL serves again
#     after the restart, and the agent lets go of the app's connection;
#   - a paused sandbox woken by a request; 100 connections at once to one port;
#   - with small caps, five sandboxes holding all the preview requests they can get, while a
#     quiet sandbox's requests are still served (a floor per sandbox no other can take);
#   - malformed hosts, ports out of range, bad mint requests; after delete: 404, 409, nothing left.
# Network: only 127.0.0.1 (the preview listener); the sandboxes have egress deny.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/ports.sh
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
# shellcheck disable=SC2016 # single-quoted $VAR and $(...) are for jq or the sandbox's shell
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
APP=$HERE/ports_app.py
CLIENT=$HERE/ports_client.py

e2e_begin ports python3

on_exit() {
  local rc=$?
  e2e_aborted "$rc"
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

start_private_daemon
PADDR=127.0.0.1:$PREVIEW_PORT
info "b3osd pid $(daemon_pid) on $URL, previews on $PADDR"

# preview HOST TARGET [curl args...]: one request to the preview listener with Host HOST. Sets
# ST; the body is in $RESP and the headers in $RESPH (record_response is not for the app's own
# answers, which the OpenAPI document does not describe).
preview() {
  local host=$1 target=$2
  shift 2
  : >"$RESP"
  : >"$RESPH"
  ST=$(curl -sS -g -o "$RESP" -D "$RESPH" -w '%{http_code}' -H "Host: $host" "$@" "$PREVIEW$target" 2>"$T/curl.err") || ST=000
}
# start_app ID PORT: the test app on 127.0.0.1:PORT inside the sandbox, logging to /tmp/app-PORT.log.
start_app() {
  api PUT "/v1/sandboxes/$1/files?path=/opt/ports_app.py" -H 'Content-Type: application/octet-stream' --data-binary "@$APP"
  run_exec "$1" "$(jq -nc --arg p "$2" '{cmd: ("nohup python3 /opt/ports_app.py " + $p + " /tmp/app-" + $p + ".log >/tmp/app-" + $p + ".out 2>&1 & for i in $(seq 50); do grep -q listening /tmp/app-" + $p + ".log 2>/dev/null && break; sleep 0.1; done; cat /tmp/app-" + $p + ".log")}')"
}
app_log() {
  run_exec "$1" "$(jq -nc --arg p "$2" '{cmd: ("cat /tmp/app-" + $p + ".log")}')"
  j .stdout
}
# jqe ARGS...: jq -e, quiet (for check: a redirect of check itself would hide its PASS/FAIL line).
jqe() { jq -e "$@" >/dev/null; }
host_of() { echo "$2-$(jq -r .host_id <<<"$1").localhost"; }  # host_of SANDBOX_JSON PORT
token_of() { sed 's/.*b3os_token=//' <<<"$1"; }

# ---- 1. a public port, loopback only, egress deny ---------------------------------------------

create_sandbox '{"forkable": true, "ports": [{"port": 8000, "public": true}, {"port": 9000, "public": false}]}'
check create.ports_201 "$(snip)" okj 201 '.host_id as $h | .egress.mode == "deny" and (.ports | length == 2) and .ports[1].url == null
  and (.ports[0].url | test("^http://8000-" + $h + "\\.localhost:[0-9]+/\\?b3os_token=[0-9a-z]{32}$"))
  and .host_id == ("sbx-" + (.id | ltrimstr("sbx_")))'
SBX=$CID
SJSON=$(cat "$RESP")
PUB=$(jq -r '.ports[0].url' <<<"$SJSON")
PUB_TOKEN=$(token_of "$PUB")
H8=$(host_of "$SJSON" 8000)
H9=$(host_of "$SJSON" 9000)
check create.url_names_listener "$PUB" bash -c "[[ '$PUB' == *':$PREVIEW_PORT/'* ]]"
api GET "/v1/sandboxes/$SBX"
check get.shows_same_url "$(snip)" bash -c "[ $ST = 200 ] && jq -e --arg u '$PUB' '.ports[0].url == \$u' '$RESP' >/dev/null"
start_app "$SBX" 8000
check app.bound_loopback "$(snip)" jt '.stdout | contains("listening on 127.0.0.1:8000")'

preview "$H8" "/?b3os_token=$PUB_TOKEN"
check public.served "HTTP $ST $(head -c 200 "$RESP")" bash -c "[ $ST = 200 ] && grep -q 'hello from the sandbox' '$RESP'"
check public.cookie_set "$(grep -i set-cookie "$RESPH")" bash -c "grep -q '^Set-Cookie: __Host-b3os_token_8000=$PUB_TOKEN; Secure; HttpOnly; SameSite=Lax; Path=/' '$RESPH'"
check public.no_referrer "Referrer-Policy: $(header Referrer-Policy)" test "$(header Referrer-Policy)" = no-referrer
# Through the name itself: *.localhost resolves to loopback in curl.
ST=$(curl -s -o "$RESP" -w '%{http_code}' "$PUB")
check public.by_name "HTTP $ST" test "$ST" = 200
preview "$H8" "/cookie-only?x=1" -H "Cookie: a=1; __Host-b3os_token_8000=$PUB_TOKEN; b=2"
check public.cookie_lets_in "HTTP $ST" test "$ST" = 404  # the app's own 404: the request got in
preview "$H8" "/chunked" -H "Cookie: __Host-b3os_token_8000=$PUB_TOKEN"
check public.chunked "HTTP $ST $(head -c 100 "$RESP")" bash -c "[ $ST = 200 ] && [ \"\$(cat '$RESP')\" = 'one,two,three' ]"
# The cookie alone from another site (every preview host is same-site with every other): a
# page on another tenant's port must not reach this one with the victim's cookie. Refused
# before the app hears of it; the page's own requests, a typed URL and a URL's token still work.
C8="Cookie: __Host-b3os_token_8000=$PUB_TOKEN"
preview "$H8" "/xsite-read" -H "$C8" -H "Sec-Fetch-Site: same-site"
expect_error xsite.same_site_cookie_403 403 forbidden "another site"
preview "$H8" "/xsite-read" -H "$C8" -H "Sec-Fetch-Site: cross-site"
expect_error xsite.cross_site_cookie_403 403 forbidden
# A page of another sandbox (another port of this one is its own tenant's: served below).
preview "$H8" "/xsite-post" -H "$C8" -H "Origin: http://8000-sbx-01m00000000000000000000000.localhost" --data x
expect_error xsite.foreign_origin_post_403 403 forbidden "another origin"
preview "$H8" "/own-read" -H "$C8" -H "Sec-Fetch-Site: same-origin"
check xsite.same_origin_served "HTTP $ST" test "$ST" = 404  # the app's own 404: let in
preview "$H8" "/own-read" -H "$C8" -H "Sec-Fetch-Site: none"
check xsite.typed_url_served "HTTP $ST" test "$ST" = 404
preview "$H8" "/echo" -H "$C8" -H "Origin: http://$H8" --data own
check xsite.own_origin_post_served "HTTP $ST $(head -c 100 "$RESP")" bash -c "[ $ST = 200 ] && [ \"\$(cat '$RESP')\" = own ]"
preview "$H8" "/own-read" -H "$C8" -H "Sec-Fetch-Site: cross-site" -H "Sec-Fetch-Mode: navigate" -H "Sec-Fetch-Dest: document"
check xsite.link_from_another_site_served "HTTP $ST" test "$ST" = 404  # a link clicked elsewhere: a navigation
preview "$H8" "/xsite-read" -H "$C8" -H "Sec-Fetch-Site: cross-site" -H "Sec-Fetch-Mode: navigate" -H "Sec-Fetch-Dest: iframe"
expect_error xsite.frame_from_another_site_403 403 forbidden
preview "$H8" "/echo" -H "$C8" -H "Sec-Fetch-Site: same-site" -H "Origin: http://$H9" --data port9000
check xsite.other_port_of_the_sandbox_served "HTTP $ST $(head -c 100 "$RESP")" bash -c "[ $ST = 200 ] && [ \"\$(cat '$RESP')\" = port9000 ]"
preview "$H8" "/xsite-token?b3os_token=$PUB_TOKEN" -H "Sec-Fetch-Site: cross-site"
check xsite.url_token_served "HTTP $ST" test "$ST" = 404  # the URL's token is a capability of its own
run_exec "$SBX" '{"cmd": "cat /tmp/app-8000.log"}'
check xsite.app_never_saw_refused "$(j .stdout | grep -c xsite- || true) xsite- requests in the app's log" \
  bash -c "! jq -r .stdout '$RESP' | grep -q 'xsite-read\|xsite-post'"
head -c 1048576 /dev/urandom >"$T/blob"
preview "$H8" "/echo?b3os_token=$PUB_TOKEN" --data-binary "@$T/blob" -H 'Content-Type: application/octet-stream'
check public.post_1mib "HTTP $ST" bash -c "[ $ST = 200 ] && cmp -s '$RESP' '$T/blob'"
ka=$(curl -s -o /dev/null -o /dev/null -w '%{http_code}:%{num_connects} ' -H "Host: $H8" -H "Cookie: __Host-b3os_token_8000=$PUB_TOKEN" \
  "$PREVIEW/" "$PREVIEW/big?n=1000")
check public.keep_alive "$ka (status:new connections per request)" test "$ka" = "200:1 200:0 "
"$CLIENT" sse "$PADDR" "$H8" "/sse?b3os_token=$PUB_TOKEN" >"$T/sse.json"
check public.sse_streamed "$(cat "$T/sse.json")" jqe '.status == 200 and .content_type == ["text/event-stream"] and (.events | length == 3)
  and (.events[2].at_s - .events[0].at_s) > 0.4' "$T/sse.json"
"$CLIENT" ws "$PADDR" "$H8" "/ws?b3os_token=$PUB_TOKEN" hello "second message" >"$T/ws.json"
check public.websocket_echo "$(cat "$T/ws.json")" jqe '.status == 101 and .echoes == ["hello", "second message"] and .close_opcode == 8' "$T/ws.json"
"$CLIENT" many "$PADDR" "$H8" "/big?n=65536&b3os_token=$PUB_TOKEN" 100 >"$T/many.json"
check public.hundred_at_once "$(jq -c 'group_by(.status) | map({status: .[0].status, n: length})' "$T/many.json")" \
  jqe 'length == 100 and all(.[]; .status == 200 and .bytes == 65536)' "$T/many.json"

# ---- 1b. a browser opening the URL is sent to it without the token ------------------------------

# A top-level navigation (what a browser sends when the URL is opened) gets a 303 to the same URL
# without b3os_token (the rest of the query kept), with the cookie, Referrer-Policy: no-referrer
# and Cache-Control: no-store; the app never sees that request.
NAV=(-H 'Sec-Fetch-Mode: navigate' -H 'Sec-Fetch-Dest: document' -H 'Accept: text/html,application/xhtml+xml,*/*;q=0.8')
preview "$H8" "/nav-first?a=1&b3os_token=$PUB_TOKEN&b=2" "${NAV[@]}"
check nav.redirect_303 "HTTP $ST $(tr '\r\n' '  ' <"$RESPH")" bash -c "[ $ST = 303 ] && [ '$(header Location)' = '/nav-first?a=1&b=2' ] &&
  [ '$(header Referrer-Policy)' = no-referrer ] && [ '$(header Cache-Control)' = no-store ] &&
  grep -q '^Set-Cookie: __Host-b3os_token_8000=$PUB_TOKEN; Secure; HttpOnly; SameSite=Lax; Path=/' '$RESPH'"
# A browser's whole visit: the navigation, the redirect followed with the cookie, then a
# subresource of the page with the Referer a browser sends (the page's URL: no token in it now).
"$CLIENT" browse "$PADDR" "$H8" "/?from=nav&b3os_token=$PUB_TOKEN" "/nav-sub.css" >"$T/browse.json"
check nav.browser_lands_without_token "$(cat "$T/browse.json")" jqe --arg t "$PUB_TOKEN" '.page_status == 200
  and (.page | contains($t) | not) and [.hops[].status] == [303, 200] and .cookies == ["__Host-b3os_token_8000"]
  and .sub_status == 404' "$T/browse.json"
# Everything else with a token is served as before (with the cookie and no-referrer): curl and
# other clients without a cookie jar, fetch and XHR, a POST, a plain-http page in a browser (no
# Sec-Fetch-Mode: it sends none to an http origin other than localhost, and keeps no Secure
# cookie from one), and a target that a Location would turn into another host.
preview "$H8" "/nav-curl?b3os_token=$PUB_TOKEN" -H 'Accept: text/html'
check nav.plain_http_page_served "HTTP $ST $(header Location)" bash -c "[ $ST = 404 ] && grep -q '^Set-Cookie: __Host-b3os_token_8000=' '$RESPH' && [ '$(header Referrer-Policy)' = no-referrer ]"
preview "$H8" "/nav-fetch?b3os_token=$PUB_TOKEN" -H 'Sec-Fetch-Mode: cors' -H 'Accept: text/html'
check nav.fetch_served "HTTP $ST" test "$ST" = 404
preview "$H8" "/nav-post?b3os_token=$PUB_TOKEN" "${NAV[@]}" --data-binary posted
check nav.post_served "HTTP $ST $(head -c 40 "$RESP")" bash -c "[ $ST = 200 ] && [ \"\$(cat '$RESP')\" = posted ]"
preview "$H8" "//nav-other.example/?b3os_token=$PUB_TOKEN" "${NAV[@]}"
check nav.never_to_another_host "HTTP $ST Location: $(header Location)" bash -c "[ $ST = 404 ] && [ -z '$(header Location)' ]"
# An older browser (no Sec-Fetch-Mode) behind TLS (the proxy in front says X-Forwarded-Proto: https).
preview "$H8" "/nav-tls?b3os_token=$PUB_TOKEN" -H 'Accept: text/html' -H 'X-Forwarded-Proto: https'
check nav.page_over_tls_redirected "HTTP $ST Location: $(header Location)" bash -c "[ $ST = 303 ] && [ '$(header Location)' = /nav-tls ]"
preview "$H8" "/nav-bad?b3os_token=0000000000000000000000000000000" "${NAV[@]}"
check nav.bad_token_401_no_cookie "$(snip)" bash -c "[ $ST = 401 ] && ! grep -qi '^set-cookie' '$RESPH'"

# ---- 2. tokens refused, never seen by the app -------------------------------------------------

preview "$H8" "/probe-no-token"
expect_error tokens.missing_401 401 unauthorized
preview "$H8" "/probe-bad-token?b3os_token=0000000000000000000000000000000"
expect_error tokens.bad_401 401 unauthorized
preview "$H8" "/probe-bad-cookie" -H "Cookie: __Host-b3os_token_8000=nope"
expect_error tokens.bad_cookie_401 401 unauthorized
apij POST "/v1/sandboxes/$SBX/ports/9000/url" '{"ttl_s": 600}'
check mint.201 "$(snip)" okj 201 '(.url | test("^http://9000-sbx-[0-9a-z]{26}\\.localhost:[0-9]+/\\?b3os_token=[0-9a-z]{32}$")) and (.expires_at | type == "string") and .port == 9000'
M9=$(j .url)
preview "$H8" "/probe-other-port?b3os_token=$(token_of "$M9")"
expect_error tokens.other_port_403 403 forbidden
preview "$H8" "/x?a=1&b3os_token=$PUB_TOKEN&b=2" -H "Cookie: keep=me; b3os_token=$PUB_TOKEN; b3os_token_9000=zzz; __Host-b3os_token_9000=zzz"
check tokens.stripped_request "HTTP $ST" test "$ST" = 404
# Only __Host-b3os_token_8000 counts (a browser takes it only from this very host); a plain
# b3os_token_8000, which a sibling sandbox's page can set on the parent domain, does not, even
# with a good token; beside the real one it locks nobody out, nor does a second bogus one.
preview "$H8" "/probe-plain-cookie" -H "Cookie: b3os_token_8000=$PUB_TOKEN; b3os_token=$PUB_TOKEN"
expect_error cookie.plain_name_401 401 unauthorized
preview "$H8" "/cookie-tossed" -H "Cookie: b3os_token_8000=bogus; b3os_token=bogus; __Host-b3os_token_8000=$PUB_TOKEN"
check cookie.tossed_plain_ignored "$(snip)" test "$ST" = 404  # the app's own 404: let in
preview "$H8" "/cookie-two" -H "Cookie: __Host-b3os_token_8000=bogus; __Host-b3os_token_8000=$PUB_TOKEN"
check cookie.valid_one_wins "$(snip)" test "$ST" = 404
# The app's Set-Cookie headers named like ours (on its host, the parent domain, nameless, any
# case) never reach the client; its other cookies and ours do.
preview "$H8" "/set-cookies?b3os_token=$PUB_TOKEN"
check setcookie.app_cannot_set_ours "$(grep -i '^set-cookie' "$RESPH" | tr '\r\n' '  ')" bash -c "[ $ST = 200 ] &&
  [ \"\$(grep -ci '^set-cookie:.*b3os_token' '$RESPH')\" = 1 ] && grep -q '^Set-Cookie: __Host-b3os_token_8000=$PUB_TOKEN; Secure' '$RESPH' &&
  grep -q '^Set-Cookie: app=1; Path=/' '$RESPH'"
"$CLIENT" ws "$PADDR" "$H8" "/ws?evilcookie&b3os_token=$PUB_TOKEN" hi >"$T/ws-evil.json"
check setcookie.not_on_upgrade "$(cat "$T/ws-evil.json")" jqe --arg c "__Host-b3os_token_8000=$PUB_TOKEN; Secure; HttpOnly; SameSite=Lax; Path=/" \
  '.status == 101 and .echoes == ["hi"] and ([.set_cookies[] | select(test("b3os_token"; "i"))] == [$c])' "$T/ws-evil.json"
LOG8=$(app_log "$SBX" 8000)
info "the app saw: $(grep -c . <<<"$LOG8") lines"
check tokens.app_never_saw_refused "$(grep probe <<<"$LOG8" | head -3)" bash -c "! grep -q probe <<<\"\$0\"" "$LOG8"
check tokens.app_never_saw_a_token "$(grep -i b3os <<<"$LOG8" | head -3)" bash -c "! grep -qi b3os_token <<<\"\$0\"" "$LOG8"
check tokens.rest_of_query_and_cookies_kept "$(grep '^GET /x' <<<"$LOG8")" bash -c "grep -q \"^GET /x?a=1&b=2 cookie='keep=me'\" <<<\"\$0\"" "$LOG8"
# The token's own characters, anywhere: in a target, a Cookie, a Referer (nav.* sent the
# browser's Referer of the page it landed on).
check nav.app_never_saw_the_token "$(grep -F "$PUB_TOKEN" <<<"$LOG8" | head -3)" bash -c "! grep -qF \"\$1\" <<<\"\$0\"" "$LOG8" "$PUB_TOKEN"
check nav.app_never_saw_the_redirected "$(grep -E 'nav-(first|tls)' <<<"$LOG8" | head -3)" bash -c "! grep -qE '^GET /nav-(first|tls)' <<<\"\$0\"" "$LOG8"
check nav.app_saw_page_and_subresource "$(grep -E 'from=nav|nav-sub' <<<"$LOG8")" bash -c "grep -q \"^GET /?from=nav cookie='' \" <<<\"\$0\" &&
  grep -q \"^GET /nav-sub.css cookie='' host=$H8 referer='http://$H8/?from=nav'\" <<<\"\$0\"" "$LOG8"

# ---- 3. a private port through a minted URL, until it expires ----------------------------------

start_app "$SBX" 9000
preview "$H9" "/"
expect_error private.no_url_no_entry 401 unauthorized
preview "$H9" "/?b3os_token=$PUB_TOKEN"
check private.public_token_not_for_private "$(snip)" test "$ST" = 401 -o "$ST" = 403
apij POST "/v1/sandboxes/$SBX/ports/9000/url" '{"ttl_s": 2}'
SHORT=$(j .url)
preview "$H9" "/?b3os_token=$(token_of "$SHORT")"
check private.minted_served "HTTP $ST $(head -c 100 "$RESP")" bash -c "[ $ST = 200 ] && grep -q hello '$RESP'"
sleep 2.5
preview "$H9" "/probe-expired?b3os_token=$(token_of "$SHORT")"
expect_error private.expired_401 401 unauthorized expired
check private.app_never_saw_expired "" bash -c "! grep -q probe-expired <<<\"\$0\"" "$(app_log "$SBX" 9000)"
# Any port may be minted, listed or not (the app decides what listens).
apij POST "/v1/sandboxes/$SBX/ports/3000/url" '{}'
check mint.unlisted_port "$(snip)" okj 201 '.port == 3000'
T3000=$(token_of "$(j .url)")
preview "$(host_of "$SJSON" 3000)" "/?b3os_token=$T3000"
expect_error private.nothing_listens_502 502 upstream_unavailable
# The request is sent behind the OPEN without waiting for the agent's connect (docs/ports.md):
# a body sent into a port where nothing listens still gets the agent's reason.
preview "$(host_of "$SJSON" 3000)" "/echo?b3os_token=$T3000" --data-binary "@$T/blob" -H 'Content-Type: application/octet-stream'
expect_error private.nothing_listens_post_502 502 upstream_unavailable

# ---- 4. bad input ----------------------------------------------------------------------------

preview "nonsense.localhost" "/"
expect_error host.malformed_404 404 not_found
preview "8000-sbx-00000000000000000000000000.localhost" "/?b3os_token=$PUB_TOKEN"
expect_error host.unknown_404 404 sandbox_not_found
preview "8000-$(jq -r .host_id <<<"$SJSON").example.com" "/?b3os_token=$PUB_TOKEN"
expect_error host.other_domain_404 404 not_found
preview "70000-$(jq -r .host_id <<<"$SJSON").localhost" "/"
expect_error host.port_out_of_range_400 400 invalid_request
apij POST "/v1/sandboxes/$SBX/ports/9000/url" '{"ttl_s": 0}'
expect_error mint.ttl_zero_400 400 invalid_request ttl_s
apij POST "/v1/sandboxes/$SBX/ports/9000/url" '{"ttl_s": 604801}'
expect_error mint.ttl_too_long_400 400 invalid_request ttl_s
apij POST "/v1/sandboxes/$SBX/ports/65536/url" '{}'
expect_error mint.port_400 400 invalid_request port
apij POST "/v1/sandboxes/sbx_00000000000000000000000000/ports/80/url" '{}'
expect_error mint.unknown_404 404 sandbox_not_found
apij POST /v1/sandboxes '{"ports": [{"port": 8000}, {"port": 8000}]}'
expect_error create.duplicate_port_400 400 invalid_request

# ---- 5. a fork: its own host_id, its own tokens ------------------------------------------------

apij POST "/v1/sandboxes/$SBX/fork" '{"count": 1}'
check fork.201 "$(snip)" okj 201 '.data | length == 1'
FJSON=$(j -c '.data[0]')
FORK=$(jq -r .id <<<"$FJSON")
echo "$FORK" >>"$T/ids"
FPUB=$(jq -r '.ports[0].url' <<<"$FJSON")
FH8=$(host_of "$FJSON" 8000)
check fork.new_host_id_and_token "$FPUB" bash -c "[ '$(jq -r .host_id <<<"$FJSON")' = 'sbx-${FORK#sbx_}' ] && [ '$(token_of "$FPUB")' != '$PUB_TOKEN' ] && [ '$FH8' != '$H8' ]"
preview "$FH8" "/from-fork?b3os_token=$(token_of "$FPUB")"
check fork.own_url_served "HTTP $ST" test "$ST" = 404  # the app (carried over in memory) answered
preview "$FH8" "/probe-source-token?b3os_token=$PUB_TOKEN"
check fork.source_token_refused "$(snip)" bash -c "[ $ST = 401 ] || [ $ST = 403 ]"
preview "$FH8" "/probe-source-minted?b3os_token=$(token_of "$M9")"
check fork.source_minted_refused "$(snip)" bash -c "[ $ST = 401 ] || [ $ST = 403 ]"
preview "$H8" "/probe-fork-token?b3os_token=$(token_of "$FPUB")"
check fork.fork_token_refused_on_source "$(snip)" bash -c "[ $ST = 401 ] || [ $ST = 403 ]"
check fork.app_saw_only_its_own "" bash -c "grep -q from-fork <<<\"\$0\" && ! grep -q probe-source <<<\"\$0\"" "$(app_log "$FORK" 8000)"
check fork.source_app_never_saw_fork_token "" bash -c "! grep -q probe-fork-token <<<\"\$0\" && ! grep -q from-fork <<<\"\$0\"" "$(app_log "$SBX" 8000)"

# ---- 6. a paused sandbox is woken by a request -------------------------------------------------

api POST "/v1/sandboxes/$FORK/pause"
check pause.paused "$(snip)" okj 200 '.status == "paused"'
preview "$FH8" "/?b3os_token=$(token_of "$FPUB")"
check pause.request_wakes_and_is_served "HTTP $ST $(head -c 80 "$RESP")" bash -c "[ $ST = 200 ] && grep -q hello '$RESP'"
api GET "/v1/sandboxes/$FORK"
check pause.running_again "$(snip)" okj 200 '.status == "running"'
# on_idle: pause: the timeout pauses it, a request wakes it.
create_sandbox '{"timeout_s": 2, "on_idle": "pause", "ports": [{"port": 8000, "public": true}]}'
IDLE=$CID
IJSON=$(cat "$RESP")
start_app "$IDLE" 8000
eventually 20 bash -c "curl -s -H 'Authorization: Bearer $KEY' '$URL/v1/sandboxes/$IDLE' | jq -e '.status == \"paused\"' >/dev/null"
api GET "/v1/sandboxes/$IDLE"
check idle.paused_by_timeout "$(snip)" okj 200 '.status == "paused"'
preview "$(host_of "$IJSON" 8000)" "/?b3os_token=$(token_of "$(jq -r '.ports[0].url' <<<"$IJSON")")"
check idle.woken_by_request "HTTP $ST" test "$ST" = 200

# ---- 6b. a snapshot restore: new host_id and tokens, the app carried over -----------------------

api POST "/v1/sandboxes/$SBX/snapshot"
check snapshot.201 "$(snip)" okj 201 '.sandbox_id == "'"$SBX"'"'
SNAP=$(j .id)
# Ports are the restore request's, as at create (a snapshot does not hold them: docs/ports.md).
create_sandbox "{\"snapshot\": \"$SNAP\", \"ports\": [{\"port\": 8000, \"public\": true}]}"
check restore.201_with_port "$(snip)" okj 201 '.snapshot == "'"$SNAP"'" and (.ports | length == 1) and (.ports[0].url | type == "string")'
RJSON=$(cat "$RESP")
RESTORED=$CID
RPUB=$(jq -r '.ports[0].url' <<<"$RJSON")
RH8=$(host_of "$RJSON" 8000)
check restore.new_host_id_and_token "$RPUB" bash -c "[ '$RH8' != '$H8' ] && [ '$(token_of "$RPUB")' != '$PUB_TOKEN' ]"
preview "$RH8" "/from-restore?b3os_token=$(token_of "$RPUB")"
check restore.app_served "HTTP $ST" test "$ST" = 404  # the app's own 404: it was restored with its memory
preview "$RH8" "/probe-restore-source-token?b3os_token=$PUB_TOKEN"
check restore.source_token_refused "$(snip)" bash -c "[ $ST = 401 ] || [ $ST = 403 ]"
preview "$H8" "/probe-restore-token?b3os_token=$(token_of "$RPUB")"
check restore.token_refused_on_source "$(snip)" bash -c "[ $ST = 401 ] || [ $ST = 403 ]"
check restore.app_saw_only_its_own "" bash -c "grep -q from-restore <<<\"\$0\" && ! grep -q probe-restore <<<\"\$0\"" "$(app_log "$RESTORED" 8000)"
delete_sandbox "$RESTORED" || true

# ---- 6c. b3osd killed with a preview connection open --------------------------------------------

# A WebSocket held open through the preview, then SIGKILL of b3osd: the client's connection
# ends with it; after the restart the same URL serves again (the public token is
# derived from the node key, kept on disk), and inside the sandbox the agent has let go of the
# app's connection (no established connection to :8000 stays behind).
APP_CONNS_CMD=$(jq -nc '{cmd: "cat /proc/net/tcp /proc/net/tcp6 | awk '"'"'$2 ~ /:1F40$/ && $4 == \"01\"'"'"' | wc -l"}')
app_conns() {  # established TCP connections to local port 8000 inside sandbox $1
  run_exec "$1" "$APP_CONNS_CMD" >/dev/null
  j .stdout | tr -d '[:space:]'
}
app_conns_at_least() { [ "$(app_conns "$1")" -ge "$2" ] 2>/dev/null; }
app_conns_none() { [ "$(app_conns "$1")" = 0 ]; }
# A WebSocket held open (a slow download would drain the socket buffers first: minutes).
python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
s.sendall(("GET /ws?b3os_token=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n" % (sys.argv[3], sys.argv[2])).encode())
head = s.recv(4096)
assert head.startswith(b"HTTP/1.1 101"), head
while s.recv(4096):
    pass
' "$PREVIEW_PORT" "$H8" "$PUB_TOKEN" &
HELD=$!
check restart.connection_open "$(app_conns "$SBX") established" eventually 10 app_conns_at_least "$SBX" 1
stop_daemon KILL
HELD_RC=0
timeout 10 tail --pid="$HELD" -f /dev/null || HELD_RC=$?
check restart.client_connection_ended "the held websocket's client still waits 10 s after the kill" test "$HELD_RC" = 0
kill "$HELD" 2>/dev/null || true
# From here on b3osd runs with small preview caps, so that 6d fills them in seconds.
FAIR_MAX=64 FAIR_PER=16 FAIR_FLOOR=2
B3OS_E2E_DAEMON_ARGS="--preview-max-requests $FAIR_MAX --preview-max-per-sandbox $FAIR_PER --preview-sandbox-floor $FAIR_FLOOR"
start_daemon || die "b3osd did not start again after SIGKILL"
preview "$H8" "/after-restart?b3os_token=$PUB_TOKEN"
check restart.url_serves_again "HTTP $ST" test "$ST" = 404  # the app's own 404
check restart.app_connection_released "$(app_conns "$SBX") established" eventually 15 app_conns_none "$SBX"

# ---- 6d. a sandbox's share of the preview under contention ---------------------------------------

# With --preview-max-requests 64, --preview-max-per-sandbox 16 and --preview-sandbox-floor 2,
# 56 requests (7/8 of 64) may be in flight in sandboxes; sandboxes above their floor of 2 share
# 56 - min(64 x 2, 56 - 16) = 16 of them, the rest only floors take (docs/ports.md). Five
# sandboxes (forks of SBX, its app running) each send 16 slow requests at once: with a cap per
# sandbox alone, four of them would hold every thread and SBX would get 503. Here they hold
# 5 x 2 + 16 = 26, and SBX's requests meanwhile are served.
apij POST "/v1/sandboxes/$SBX/fork" '{"count": 5}'
check fair.forks_201 "$(snip)" okj 201 '.data | length == 5'
HOSTILE=()
for row in $(j -c '.data[] | {id, h: .host_id, u: .ports[0].url}'); do
  echo "$(jq -r .id <<<"$row")" >>"$T/ids"
  HOSTILE+=("8000-$(jq -r .h <<<"$row").localhost" "/sleep?s=5&b3os_token=$(token_of "$(jq -r .u <<<"$row")")")
done
"$CLIENT" fair "$PADDR" "$H8" "/?b3os_token=$PUB_TOKEN" "$FAIR_FLOOR" 1.5 "$FAIR_PER" "${HOSTILE[@]}" >"$T/fair.json"
info "fair: $(jq -c '{hostile: [.hostile[] | group_by(.status) | map({(.[0].status | tostring): length}) | add], quiet: [.quiet[].status]}' "$T/fair.json")"
# Each took at least its floor and at most the cap; which of them got the shared part depends
# on whose requests came first (one may take 16 and never be refused), but some were refused.
check fair.each_took_its_floor_and_more_were_refused "$(jq -c '[.hostile[] | map(.status)]' "$T/fair.json"); unanswered: $(jq -c '[.hostile[][] | select(.status == 0) | .error] | unique' "$T/fair.json")" jqe '
  (.hostile | length == 5) and all(.hostile[]; (map(select(.status == 200 and .body == "slept 5\n")) | length >= 2)
  and (map(select(.status == 200)) | length <= 16) and all(.[]; .status == 200 or .status == 429 or .status == 503))
  and ([.hostile[][] | select(.status == 429)] | length > 0)' "$T/fair.json"
check fair.hostiles_hold_floors_and_the_shared_part "$(jq -c '[.hostile[][] | select(.status == 200)] | length' "$T/fair.json") in flight" \
  jqe '[.hostile[][] | select(.status == 200)] | length == 26' "$T/fair.json"
check fair.refusal_says_why "$(jq -c '[.hostile[][] | select(.status == 429) | .message] | unique' "$T/fair.json")" jqe '
  [.hostile[][] | select(.status == 429)] | length > 0 and all(.[]; .code == "concurrency_limited" and (.message | test("floor")))' "$T/fair.json"
check fair.quiet_sandbox_served "$(jq -c .quiet "$T/fair.json")" jqe '
  ([.hostile[][] | select(.status == 200) | .end_s] | min) as $held
  | all(.quiet[]; .status == 200 and .body == "hello from the sandbox\n" and .end_s < $held)' "$T/fair.json"
# A sandbox alone is held to its cap (16), no more.
"$CLIENT" many "$PADDR" "$H8" "/sleep?s=3&b3os_token=$PUB_TOKEN" 20 >"$T/cap.json"
check fair.cap_per_sandbox "$(jq -c 'group_by(.status) | map({status: .[0].status, n: length})' "$T/cap.json")" \
  jqe '([.[] | select(.status == 200)] | length == 16) and ([.[] | select(.status == 429)] | length == 4)' "$T/cap.json"
for ((i = 0; i < ${#HOSTILE[@]}; i += 2)); do
  h=${HOSTILE[$i]%%.localhost}
  delete_sandbox "sbx_${h#8000-sbx-}" || true
done

# ---- 7. after delete: 404, 409, nothing left ---------------------------------------------------

delete_sandbox "$FORK" || true
delete_sandbox "$IDLE" || true
delete_sandbox "$SBX"
check delete.200 "$(snip)" okj 200 '.status == "stopped" and all(.ports[]; .url == null)'
preview "$H8" "/?b3os_token=$PUB_TOKEN"
expect_error delete.public_url_404 404 sandbox_not_found
preview "$H9" "/?b3os_token=$(token_of "$M9")"
expect_error delete.minted_url_404 404 sandbox_not_found
preview "$FH8" "/?b3os_token=$(token_of "$FPUB")"
expect_error delete.fork_url_404 404 sandbox_not_found
apij POST "/v1/sandboxes/$SBX/ports/9000/url" '{}'
expect_error delete.mint_409 409 sandbox_not_running
check delete.no_containers "$(runsc_list | tr '\n' ' ')" eventually 30 bash -c "! runsc --root '$T/run/runsc' list --quiet 2>/dev/null | grep -qE '$SBX|$FORK|$IDLE'"
check delete.no_cgroups "$(cgroup_dirs "$SBX") $(cgroup_dirs "$FORK")" eventually 30 bash -c "[ -z \"\$(ls -d /sys/fs/cgroup/*/b3os/{$SBX,$FORK,$IDLE} 2>/dev/null)\" ]"
check delete.no_tokens_kept "$(sqlite3 "$T/data/b3os.db" 'SELECT count(*) FROM port_tokens' 2>&1)" \
  bash -c "[ \"\$(sqlite3 '$T/data/b3os.db' 'SELECT count(*) FROM port_tokens')\" = 0 ]"

# Every response of the API the suite received, against docs/openapi.yaml.
check_responses

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
echo "passed $P, failed $F, skipped $S in $((($(now_ms) - SUITE_START) / 1000)) s"
[ "$F" = 0 ] || exit 1
