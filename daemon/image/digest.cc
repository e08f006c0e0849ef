#include "daemon/image/digest.h"

#include <cstdlib>

namespace b3os::image {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Only allocation can fail here; there is nothing sensible to return from a constructor.
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) std::abort();
}

void Sha256::update(const void* data, size_t size) { EVP_DigestUpdate(ctx_.get(), data, size); }

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_.get(), md, &n);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace b3os::image
