#pragma once
// Object storage for a cluster's images (docs/cluster.md, "Snapshots move"): a snapshot taken
// on one node is restored on another by way of it. Two backends behind one interface:
//   dir:/PATH                        a directory every node mounts (NFS, a shared volume)
//   s3://BUCKET[/PREFIX][?endpoint=URL&region=R]
//                                    an S3-compatible API, requests signed with AWS SigV4 by
//                                    libcurl (CURLOPT_AWS_SIGV4), credentials from
//                                    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and
//                                    AWS_SESSION_TOKEN); with endpoint=, path-style URLs
//                                    (MinIO, Ceph, test servers), else AWS's virtual hosts.
// Objects are whole files, put and got by key ("snapshots/snp_x/checkpoint.img"); a put is
// visible only once complete (dir: written beside, then renamed; S3: a PUT is atomic).
//
// Errors: kNotFound for a key that is not there; kNodeUnavailable for a store that cannot be
// reached or failed (the caller retries later); kInternal for local files.

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"

namespace b3os::objstore {

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  /// Stores the file at `path` under `key`; `sha256_hex` is its SHA-256 (S3 checks it).
  virtual Result<void> put_file(const std::string& key, const std::string& path, const std::string& sha256_hex) = 0;
  /// Writes the object `key` to the file `path` (created or truncated).
  virtual Result<void> get_file(const std::string& key, const std::string& path) = 0;
  /// Whether `key` is there.
  virtual Result<bool> exists(const std::string& key) = 0;
  /// Removes `key`; a key that is not there is not an error.
  virtual Result<void> remove(const std::string& key) = 0;
  /// Where it is, for logs and errors (no credentials).
  virtual std::string describe() const = 0;
};

/// Opens the store a `--object-store` value names; an error says what is wrong with it.
Result<std::unique_ptr<ObjectStore>> open_object_store(const std::string& spec);

}  // namespace b3os::objstore
