#include "daemon/sandbox/ports.h"

// The text side of ports: preview host names, token parameters and cookies, port URLs and
// their tokens. Apart from the Ports service (ports.cc) so that the fuzz target compiles only
// this.

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <charconv>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "common/unique_fd.h"

namespace b3os::sandbox {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr size_t kKeyBytes = 32;
constexpr size_t kTokenChars = 32;  // base32: 160 bits
constexpr std::string_view kB32 = "0123456789abcdefghjkmnpqrstvwxyz";

std::string base32(const unsigned char* p, size_t n, size_t chars) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n && out.size() < chars; ++i) {
    acc = (acc << 8) | p[i];
    bits += 8;
    while (bits >= 5 && out.size() < chars) {
      out.push_back(kB32[(acc >> (bits - 5)) & 31]);
      bits -= 5;
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// One cookie pair's name, trimmed.
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Error not_found_host(std::string_view host) {
  return Error{ErrorCode::kNotFound,
               "no preview here: the host \"" + std::string(host.substr(0, 200)) +
                   "\" is not of the form {port}-{host_id}.{domain}",
               0};
}

}  // namespace

std::string host_id_of(std::string_view sandbox_id) {
  return "sbx-" + std::string(sandbox_id.substr(std::min<size_t>(4, sandbox_id.size())));
}

Result<PreviewTarget> parse_preview_host(std::string_view host_in, std::string_view domain_in) {
  std::string host = lower(host_in);
  const std::string domain = lower(domain_in);
  // The listener's port, if the client sent one, is not part of the name.
  if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    const std::string_view p = std::string_view(host).substr(colon + 1);
    if (p.empty() || p.find_first_not_of("0123456789") != std::string_view::npos) return fail(not_found_host(host_in));
    host.resize(colon);
  }
  if (!host.empty() && host.back() == '.') host.pop_back();  // a fully qualified name
  if (host.size() <= domain.size() + 1 || host.compare(host.size() - domain.size(), domain.size(), domain) != 0 ||
      host[host.size() - domain.size() - 1] != '.')
    return fail(not_found_host(host_in));
  const std::string_view label = std::string_view(host).substr(0, host.size() - domain.size() - 1);
  const size_t dash = label.find('-');
  if (dash == std::string_view::npos || dash == 0) return fail(not_found_host(host_in));
  const std::string_view port_s = label.substr(0, dash);
  const std::string_view host_id = label.substr(dash + 1);
  if (port_s.find_first_not_of("0123456789") != std::string_view::npos) return fail(not_found_host(host_in));
  const std::string sandbox_id = "sbx_" + std::string(host_id.substr(std::min<size_t>(4, host_id.size())));
  // "sbx-..." as b3os names hosts (a DNS label has no "_"), or the sandbox id itself, as E2B's
  // SDK builds them (getHost: "{port}-{sandboxId}.{domain}").
  if ((host_id.substr(0, 4) != "sbx-" && host_id.substr(0, 4) != "sbx_") || !valid_id(sandbox_id, "sbx"))
    return fail(not_found_host(host_in));
  int port = 0;
  if (port_s.size() > 5 || std::from_chars(port_s.data(), port_s.data() + port_s.size(), port).ec != std::errc() ||
      port < 1 || port > 65535)
    return fail(ErrorCode::kInvalidRequest, "port " + std::string(port_s.substr(0, 12)) + " is outside 1-65535");
  return PreviewTarget{sandbox_id, std::string(host_id), port};
}

StrippedTarget strip_token_param(std::string_view target) {
  StrippedTarget out;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) {
    out.target = std::string(target);
    return out;
  }
  out.target = std::string(target.substr(0, q));
  std::string_view query = target.substr(q + 1);
  std::string kept;
  while (true) {
    const size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    const std::string_view name = part.substr(0, part.find('='));
    if (name == kTokenParam) {
      if (!out.token) out.token = std::string(part.size() > name.size() ? part.substr(name.size() + 1) : "");
    } else if (!part.empty()) {
      if (!kept.empty()) kept += '&';
      kept += part;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  if (!kept.empty()) out.target += "?" + kept;
  return out;
}

bool is_token_cookie_name(std::string_view name_in) {
  const std::string name = lower(trim(name_in));
  std::string_view n = name;
  for (std::string_view prefix : {"__host-", "__secure-"})
    if (n.substr(0, prefix.size()) == prefix) {
      n.remove_prefix(prefix.size());
      break;
    }
  return n.substr(0, kTokenParam.size()) == kTokenParam;
}

StrippedCookies strip_token_cookies(std::string_view header, int port) {
  StrippedCookies out;
  const std::string mine = std::string(kTokenCookie) + std::to_string(port);
  while (!header.empty()) {
    const size_t semi = header.find(';');
    const std::string_view pair = trim(header.substr(0, semi));
    const size_t eq = pair.find('=');
    const std::string_view name = trim(pair.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? std::string_view() : trim(pair.substr(eq + 1));
    if (name == mine) {
      // Exactly this name (the prefix in its own case): a browser took it from this host only.
      if (!value.empty() && out.tokens.size() < kMaxTokenCookies) out.tokens.emplace_back(value);
    } else if (is_token_cookie_name(name) || (name.empty() && is_token_cookie_name(value.substr(0, value.find('='))))) {
      // Named like ours but not the host's own cookie: another port's, an older b3osd's, or one
      // a sibling host tossed onto the parent domain. No token, and not the app's business.
    } else if (!pair.empty()) {
      if (!out.cookie.empty()) out.cookie += "; ";
      out.cookie += pair;
    }
    if (semi == std::string_view::npos) break;
    header.remove_prefix(semi + 1);
  }
  return out;
}

bool sets_token_cookie(std::string_view set_cookie) {
  const std::string_view pair = trim(set_cookie.substr(0, set_cookie.find(';')));
  const size_t eq = pair.find('=');
  // No "=": a nameless cookie whose value is the whole pair (RFC 6265bis 5.6).
  if (eq == std::string_view::npos) return is_token_cookie_name(pair);
  const std::string_view name = trim(pair.substr(0, eq));
  if (!name.empty()) return is_token_cookie_name(name);
  const std::string_view value = trim(pair.substr(eq + 1));
  return is_token_cookie_name(value.substr(0, value.find('=')));
}

std::string token_cookie(int port, std::string_view token) {
  return std::string(kTokenCookie) + std::to_string(port) + "=" + std::string(token) +
         "; Secure; HttpOnly; SameSite=Lax; Path=/";
}

std::string token_sha256(std::string_view token) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), md);
  return to_hex(std::string_view(reinterpret_cast<const char*>(md), sizeof md));
}

bool tokens_equal(std::string_view a, std::string_view b) {
  // The length of a token is no secret (it is fixed); the contents are compared in full.
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string new_port_token() { return random_base32(kTokenChars); }

PortUrls PortUrls::load(const PreviewConfig& cfg) {
  if (!cfg.key_file.empty()) {
    UniqueFd fd(::open(cfg.key_file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd && errno == ENOENT) {
      const std::string key = random_bytes(kKeyBytes);
      const std::string tmp = cfg.key_file + ".tmp";
      UniqueFd w(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
      if (w && ::write(w.get(), key.data(), key.size()) == static_cast<ssize_t>(key.size()) && ::fsync(w.get()) == 0 &&
          ::rename(tmp.c_str(), cfg.key_file.c_str()) == 0)
        return PortUrls(cfg, key);
      spdlog::warn("preview: cannot write {}: {}; public port URLs will change at the next start", cfg.key_file,
                   std::strerror(errno));
    } else if (fd) {
      char buf[kKeyBytes];
      if (::read(fd.get(), buf, sizeof buf) == static_cast<ssize_t>(sizeof buf)) return PortUrls(cfg, std::string(buf, sizeof buf));
      spdlog::warn("preview: {} is not a key of {} bytes; using one in memory", cfg.key_file, kKeyBytes);
    } else {
      spdlog::warn("preview: cannot read {}: {}; using a key in memory", cfg.key_file, std::strerror(errno));
    }
  }
  return PortUrls(cfg, random_bytes(kKeyBytes));
}

std::string PortUrls::derived_token(std::string_view msg) const {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), md, &len);
  return base32(md, len, kTokenChars);
}

std::string PortUrls::public_token(std::string_view sandbox_id, int port) const {
  return derived_token("b3os public port\n" + std::string(sandbox_id) + "\n" + std::to_string(port));
}

std::string PortUrls::access_token(std::string_view sandbox_id) const {
  return derived_token("b3os e2b access\n" + std::string(sandbox_id));
}

std::string PortUrls::traffic_token(std::string_view sandbox_id) const {
  return derived_token("b3os e2b traffic\n" + std::string(sandbox_id));
}

std::string PortUrls::url(std::string_view sandbox_id, int port, std::string_view token) const {
  return "http://" + std::to_string(port) + "-" + host_id_of(sandbox_id) + "." + cfg_.domain + ":" +
         std::to_string(cfg_.listen_port) + "/?" + std::string(kTokenParam) + "=" + std::string(token);
}

json PortUrls::ports_json(const store::SandboxRecord& r) const {
  json ports = json::array();
  for (auto& p : r.ports) {
    // An ended sandbox serves nothing: its URLs are not shown.
    const bool show = p.is_public && !r.ended();
    ports.push_back({{"port", p.port}, {"public", p.is_public}, {"url", show ? json(url(r.id, p.port, public_token(r.id, p.port))) : json(nullptr)}});
  }
  return ports;
}

}  // namespace b3os::sandbox
