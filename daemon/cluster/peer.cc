#include "daemon/cluster/peer.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

#include "common/clock.h"
#include "daemon/cluster/signature.h"

namespace b3os::cluster {

namespace {

struct CurlFree {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

size_t collect(char* p, size_t size, size_t n, void* out) {
  auto* s = static_cast<std::string*>(out);
  // An answer is a small JSON document; a peer that sends more is cut off.
  if (s->size() + size * n > (1u << 20)) return 0;
  s->append(p, size * n);
  return size * n;
}

}  // namespace

namespace {
std::string g_tls_ca;  // set once at start
}  // namespace

void set_tls_ca(std::string ca_file) { g_tls_ca = std::move(ca_file); }
const std::string& tls_ca() { return g_tls_ca; }

Result<PeerAnswer> post_to_node(const std::string& node_url, std::string_view secret, std::string_view route,
                                const std::string& target, const std::string& body, std::chrono::milliseconds timeout) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, CurlFree> c(curl_easy_init());
  if (!c) return fail(ErrorCode::kInternal, "curl_easy_init failed");
  const int64_t now = now_unix_ms();
  const std::string method = std::string(route) + ":POST";
  std::unique_ptr<curl_slist, ListFree> headers;
  auto add = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
  add("Content-Type: application/json");
  add("Expect:");
  const std::string nonce = new_nonce(), digest = sha256_hex(body);
  add(std::string(kTimeHeader) + ": " + std::to_string(now));
  add(std::string(kNonceHeader) + ": " + nonce);
  add(std::string(kBodyHeader) + ": " + digest);
  add(std::string(kSignatureHeader) + ": " +
      sign_request(secret, {method, target, now, nonce, digest, [](std::string_view) { return std::string_view(); }}));
  add(std::string(kRouteHeader) + ": " + std::string(route));
  const std::string url = node_url + target;
  PeerAnswer out;
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  if (node_url.rfind("https://", 0) == 0) {
    // The node's internal listener speaks TLS: its certificate chains to the cluster's CA.
    if (tls_ca().empty()) return fail(ErrorCode::kNodeUnavailable, node_url + " speaks TLS and no --cluster-tls-ca was given");
    curl_easy_setopt(c.get(), CURLOPT_CAINFO, tls_ca().c_str());
    curl_easy_setopt(c.get(), CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c.get(), CURLOPT_SSL_VERIFYHOST, 2L);
  }
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, 2000L);
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &out.body);
  const CURLcode rc = curl_easy_perform(c.get());
  if (rc != CURLE_OK)
    return fail(ErrorCode::kNodeUnavailable, "asking " + node_url + target + ": " + curl_easy_strerror(rc));
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &out.status);
  return out;
}

}  // namespace b3os::cluster
