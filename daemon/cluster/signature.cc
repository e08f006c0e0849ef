#include "daemon/cluster/signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace b3os::cluster {

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d);
  return hex(d, sizeof d);
}

std::string new_nonce() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) std::abort();  // no randomness: nothing safe to sign with
  return hex(b, sizeof b);
}

std::string sign_request(std::string_view secret, const Signed& s) {
  // Every field on its own line, each variable one hashed or of a fixed alphabet (a method,
  // a target without newlines, digits, hex), so no two requests give one message.
  std::string msg = "b3os-cluster-v2\n";
  msg.append(s.method).append("\n").append(s.target).append("\n").append(std::to_string(s.time_ms)).append("\n");
  msg.append(s.nonce).append("\n").append(s.body).append("\n");
  for (std::string_view name : kCredentialHeaders) {
    const std::string_view v = s.header ? s.header(name) : std::string_view();
    msg.append(name).append(":").append(v.empty() ? "-" : sha256_hex(v)).append("\n");
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), mac, &len);
  return hex(mac, len);
}

ReplayGuard::Seen ReplayGuard::first(std::string_view signature, int64_t now_ms) {
  Key k;
  auto word = [&](size_t at) {
    uint64_t v = 0;
    if (signature.size() >= at + 16) std::from_chars(signature.data() + at, signature.data() + at + 16, v, 16);
    return v;
  };
  k.a = word(0);
  k.b = word(16);
  std::lock_guard lk(mu_);
  while (!order_.empty() && order_.front().first < now_ms) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (seen_.count(k)) return Seen::kReplay;
  if (seen_.size() >= kMaxRemembered) return Seen::kFull;
  seen_.insert(k);
  // Remembered until its time can no longer pass the freshness check (2 windows: the time
  // may be up to a window ahead of this clock).
  order_.emplace_back(now_ms + 2 * kMaxSkewMs, k);
  return Seen::kFirst;
}

Result<void> verify_request(std::string_view secret, std::string_view method, std::string_view target,
                            const std::function<std::string_view(std::string_view)>& header, int64_t now_ms,
                            ReplayGuard* replay) {
  const std::string_view time_header = header(kTimeHeader), signature_header = header(kSignatureHeader);
  const std::string_view nonce = header(kNonceHeader), body = header(kBodyHeader);
  if (time_header.empty() || signature_header.empty())
    return fail(ErrorCode::kUnauthorized, "this is a cluster node's internal port: requests come signed by a router "
                                          "(docs/cluster.md); clients use the router or the node's API port");
  if (nonce.size() < 16 || nonce.size() > 64 || body.empty() || body.size() > 64)
    return fail(ErrorCode::kUnauthorized, "the cluster signature's nonce or body digest is missing (a router or node "
                                          "older than this one? every member of a cluster runs one version)");
  int64_t t = 0;
  auto [end, ec] = std::from_chars(time_header.data(), time_header.data() + time_header.size(), t);
  if (ec != std::errc() || end != time_header.data() + time_header.size())
    return fail(ErrorCode::kUnauthorized, std::string(kTimeHeader) + " is not a time in Unix milliseconds");
  if (t < now_ms - kMaxSkewMs || t > now_ms + kMaxSkewMs)
    return fail(ErrorCode::kUnauthorized, "the cluster signature is older or newer than 30 s: are the clocks of the "
                                          "router and this node in step?");
  const std::string want = sign_request(secret, Signed{method, target, t, nonce, body, header});
  if (signature_header.size() != want.size() || CRYPTO_memcmp(signature_header.data(), want.data(), want.size()) != 0)
    return fail(ErrorCode::kUnauthorized, "the cluster signature does not match (a different cluster secret, or a "
                                          "request changed on the way?)");
  if (replay) switch (replay->first(want, now_ms)) {
      case ReplayGuard::Seen::kFirst:
        break;
      case ReplayGuard::Seen::kReplay:
        return fail(ErrorCode::kUnauthorized, "this signed request was seen before: a replay is refused");
      case ReplayGuard::Seen::kFull:
        return fail(ErrorCode::kNodeUnavailable, "this node has served " + std::to_string(ReplayGuard::kMaxRemembered) +
                                                     " signed requests within a minute, its most; retry shortly");
    }
  return {};
}

Result<std::string> read_cluster_secret(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fail(errno_error(ErrorCode::kInvalidRequest, "cluster secret " + path, errno));
  // Its owner, and its group when the group may read it (Kubernetes gives a Secret's files to
  // the pod's fsGroup, mode 0440); never everyone, and nobody else may write it.
  if ((st.st_mode & 0027) != 0)
    return fail(ErrorCode::kInvalidRequest, "cluster secret " + path +
                                                ": others can read it or its group can write it (chmod 600 it; in "
                                                "Kubernetes mount the Secret with defaultMode 0400)");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > 4096) return fail(ErrorCode::kInvalidRequest, "cluster secret " + path + ": longer than 4096 bytes");
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  if (s.size() < 32)
    return fail(ErrorCode::kInvalidRequest,
                "cluster secret " + path + ": at least 32 bytes (make one with: head -c 32 /dev/urandom | base64)");
  return s;
}

}  // namespace b3os::cluster
