#include "daemon/sandbox/ports.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <charconv>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/unique_fd.h"
#include "daemon/sandbox/lifecycle.h"
#include "daemon/sandbox/registry.h"
#include "daemon/sandbox/state.h"

namespace b3os::sandbox {

using nlohmann::json;
using namespace std::chrono_literals;

Result<json> Ports::mint(const Principal& p, const std::string& id, int port, int ttl_s) {
  if (port < 1 || port > 65535) return fail(ErrorCode::kInvalidRequest, "port must be 1 to 65535");
  if (ttl_s < 1 || ttl_s > kMaxUrlTtlS)
    return fail(ErrorCode::kInvalidRequest, "ttl_s must be 1 to " + std::to_string(kMaxUrlTtlS) + " (7 days)");
  auto s = lifecycle_.running(p, id);  // 404, or 409 sandbox_not_running for an ended one
  if (!s) return fail(s.error());
  {
    std::lock_guard lk((*s)->mu);
    if ((*s)->rec.ended()) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is " + std::string(api_status((*s)->rec.state)));
  }
  const std::string token = new_port_token();
  const int64_t now = now_unix_ms();
  store::PortTokenRecord rec{token_sha256(token), id, port, now, now + int64_t{ttl_s} * 1000};
  if (auto r = store_.put_port_token(rec, now); !r) return fail(r.error());
  return json{{"object", "port_url"}, {"port", port}, {"url", urls_.url(id, port, token)}, {"expires_at", format_rfc3339(rec.expires_ms)}};
}

Result<void> Ports::check_token(const store::SandboxRecord& rec, const PreviewTarget& t,
                                const std::optional<std::string>& token) {
  const int port = t.port;
  if (rec.open_ports) return {};  // E2B's public traffic: every port, no token
  // E2B's traffic token: from its header only (never a URL's or a cookie's), for every port.
  if (t.traffic_token) {
    if (tokens_equal(*t.traffic_token, urls_.traffic_token(rec.id))) return {};
    return fail(ErrorCode::kUnauthorized, "the e2b-traffic-access-token is not this sandbox's");
  }
  if (!token || token->empty())
    return fail(ErrorCode::kUnauthorized,
                "no token: open the preview URL (with ?b3os_token=...) the API gave. A browser sent on from it without "
                "the token did not keep its cookie: a browser keeps it over https, or over http to *.localhost in "
                "Chrome or Firefox, not Safari (docs/ports.md)");
  for (auto& p : rec.ports)
    if (p.port == port && p.is_public && tokens_equal(*token, urls_.public_token(rec.id, port))) return {};
  auto row = store_.find_port_token(token_sha256(*token));
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kUnauthorized, "unknown token for this preview URL");
  if ((*row)->sandbox_id != rec.id || (*row)->port != port)
    return fail(ErrorCode::kForbidden, "this token is for another sandbox or port");
  if ((*row)->expires_ms <= now_unix_ms())
    return fail(ErrorCode::kUnauthorized, "this preview URL expired at " + format_rfc3339((*row)->expires_ms) +
                                              "; mint another (POST /v1/sandboxes/" + rec.id + "/ports/" +
                                              std::to_string(port) + "/url)");
  return {};
}

Result<void> Ports::authorize(const PreviewTarget& t, const std::optional<std::string>& token) {
  auto s = registry_.find(t.sandbox_id);
  store::SandboxRecord rec;
  if (s) {
    std::lock_guard lk(s->mu);
    rec = s->rec;
  }
  if (!s || rec.ended()) return fail(ErrorCode::kSandboxNotFound, "no running sandbox has host_id " + t.host_id);
  return check_token(rec, t, token);
}

Result<std::unique_ptr<PortConnection>> Ports::connect(const PreviewTarget& t, const std::optional<std::string>& token) {
  auto s = registry_.find(t.sandbox_id);
  const auto gone = [&] {
    return Error{ErrorCode::kSandboxNotFound, "no running sandbox has host_id " + t.host_id, 0};
  };
  if (!s) return fail(gone());
  store::SandboxRecord rec;
  {
    std::lock_guard lk(s->mu);
    rec = s->rec;
  }
  if (rec.ended()) return fail(gone());
  if (auto r = check_token(rec, t, token); !r) return fail(r.error());
  // A paused sandbox (on_idle: pause, or POST pause) is resumed by its first request. While a
  // pause or a resume is under way the request waits for it (up to 10 s), rather than fail.
  for (auto until = std::chrono::steady_clock::now() + 10s;;) {
    State state;
    {
      std::lock_guard lk(s->mu);
      state = s->rec.state;
    }
    if (is_live(state) && state != State::kPaused && state != State::kPausing && state != State::kResuming) break;
    if (!is_live(state)) return fail(gone());
    if (state == State::kPaused) {
      // Open ports (E2B's public traffic) let anyone with the host in: they neither resume a
      // paused sandbox nor keep one alive (E2B's Sandbox.connect resumes it).
      if (rec.open_ports)
        return fail(ErrorCode::kSandboxNotRunning, "sandbox " + t.sandbox_id + " is paused; connect to it to resume it");
      Timing timing;
      auto r = lifecycle_.resume(Principal{rec.project_id, "", "", CredentialKind::kInternal}, t.sandbox_id, timing);
      if (r) {
        spdlog::info("sandbox {}: resumed by a request to port {}", t.sandbox_id, t.port);
        continue;
      }
      if (r.error().code != ErrorCode::kSandboxNotRunning) return fail(r.error());
    }
    if (std::chrono::steady_clock::now() >= until)
      return fail(ErrorCode::kSandboxNotRunning, "sandbox " + t.sandbox_id + " did not finish pausing or resuming in 10 s");
    std::this_thread::sleep_for(20ms);
  }
  Awake awake = lifecycle_.awake(*s);
  // Activity keeps the sandbox from its idle timeout; written at most once a second, not per
  // request (each write is a store transaction).
  if (!rec.open_ports && now_unix_ms() - s->last_activity_ms.load() >= 1000) lifecycle_.touch(*s);
  auto stream = s->channel ? s->channel->open({{"op", "port_connect"}, {"port", t.port}})
                           : Result<std::shared_ptr<agentlink::Stream>>(fail(ErrorCode::kSandboxNotRunning, "no agent channel"));
  if (!stream) return fail(lifecycle_.explain(*s, stream.error()));
  return std::make_unique<PortConnection>(std::move(s), std::move(awake), std::move(*stream));
}

}  // namespace b3os::sandbox
