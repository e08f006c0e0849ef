#pragma once
// SHA-256 over a stream of blocks, for blob digests and layers' diff_ids.

#include <openssl/evp.h>

#include <memory>
#include <string>
#include <string_view>

namespace b3os::image {

/// A running SHA-256; hex() ends it.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  /// The digest as 64 lowercase hex digits.
  std::string hex();

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

}  // namespace b3os::image
