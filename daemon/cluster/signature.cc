#include "daemon/cluster/signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
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

std::string sha256_hex(std::string_view data) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d);
  return hex(d, sizeof d);
}

}  // namespace

std::string sign_request(std::string_view secret, std::string_view method, std::string_view target, int64_t time_ms,
                         std::string_view authorization) {
  std::string msg = "b3os-cluster-v1\n";
  msg.append(method).append("\n").append(target).append("\n").append(std::to_string(time_ms)).append("\n");
  msg += sha256_hex(authorization);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), mac, &len);
  return hex(mac, len);
}

Result<void> verify_request(std::string_view secret, std::string_view method, std::string_view target,
                            std::string_view time_header, std::string_view signature_header,
                            std::string_view authorization, int64_t now_ms) {
  if (time_header.empty() || signature_header.empty())
    return fail(ErrorCode::kUnauthorized, "this is a cluster node's internal port: requests come signed by a router "
                                          "(docs/cluster.md); clients use the router or the node's API port");
  int64_t t = 0;
  auto [end, ec] = std::from_chars(time_header.data(), time_header.data() + time_header.size(), t);
  if (ec != std::errc() || end != time_header.data() + time_header.size())
    return fail(ErrorCode::kUnauthorized, std::string(kTimeHeader) + " is not a time in Unix milliseconds");
  if (t < now_ms - kMaxSkewMs || t > now_ms + kMaxSkewMs)
    return fail(ErrorCode::kUnauthorized, "the cluster signature is older or newer than 30 s: are the clocks of the "
                                          "router and this node in step?");
  const std::string want = sign_request(secret, method, target, t, authorization);
  if (signature_header.size() != want.size() || CRYPTO_memcmp(signature_header.data(), want.data(), want.size()) != 0)
    return fail(ErrorCode::kUnauthorized, "the cluster signature does not match (a different cluster secret?)");
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
