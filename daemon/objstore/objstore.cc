#include "daemon/objstore/objstore.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/scope_exit.h"

namespace fs = std::filesystem;

namespace b3os::objstore {

namespace {

/// A key is a relative path of plain segments: no "..", no empty or hidden-dot segment, no
/// backslash; objects can then never land outside a dir: store.
bool valid_key(const std::string& key) {
  if (key.empty() || key.size() > 900 || key.front() == '/' || key.back() == '/') return false;
  size_t i = 0;
  while (i <= key.size()) {
    const size_t j = std::min(key.find('/', i), key.size());
    const std::string_view seg(key.data() + i, j - i);
    if (seg.empty() || seg == "." || seg == "..") return false;
    for (char c : seg)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
    i = j + 1;
  }
  return true;
}

Result<void> bad_key(const std::string& key) {
  return fail(ErrorCode::kInternal, "object key \"" + key.substr(0, 100) + "\" is not a plain relative path");
}

// ---- dir: a shared directory ----

class DirStore final : public ObjectStore {
 public:
  explicit DirStore(std::string root) : root_(std::move(root)) {}

  Result<void> put_file(const std::string& key, const std::string& path, const std::string&) override {
    if (!valid_key(key)) return bad_key(key);
    const fs::path dst = fs::path(root_) / key;
    std::error_code ec;
    fs::create_directories(dst.parent_path(), ec);
    if (ec) return unavailable("creating " + dst.parent_path().string() + ": " + ec.message());
    // Beside, then renamed: a reader on another node sees the whole file or none.
    const std::string tmp = dst.string() + ".part." + std::to_string(::getpid()) + "." +
                            std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) {
      const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        if (::fsync(fd) != 0) ec = std::error_code(errno, std::generic_category());
        ::close(fd);
      }
    }
    if (!ec) fs::rename(tmp, dst, ec);
    if (ec) {
      std::error_code ignore;
      fs::remove(tmp, ignore);
      return unavailable("writing " + dst.string() + ": " + ec.message());
    }
    return {};
  }

  Result<void> get_file(const std::string& key, const std::string& path) override {
    if (!valid_key(key)) return bad_key(key);
    const fs::path src = fs::path(root_) / key;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) {
      if (!fs::exists(root_, ec)) return unavailable(root_ + " is not there (is the shared directory mounted?)");
      return fail(ErrorCode::kNotFound, "no object " + key + " in " + describe());
    }
    fs::copy_file(src, path, fs::copy_options::overwrite_existing, ec);
    if (ec) return unavailable("reading " + src.string() + ": " + ec.message());
    return {};
  }

  Result<bool> exists(const std::string& key) override {
    if (!valid_key(key)) return fail(bad_key(key).error());
    std::error_code ec;
    if (!fs::exists(root_, ec)) return fail(unavailable(root_ + " is not there (is the shared directory mounted?)").error());
    return fs::is_regular_file(fs::path(root_) / key, ec);
  }

  Result<void> remove(const std::string& key) override {
    if (!valid_key(key)) return bad_key(key);
    std::error_code ec;
    fs::remove(fs::path(root_) / key, ec);
    if (ec) return unavailable("removing " + key + ": " + ec.message());
    return {};
  }

  std::string describe() const override { return "dir:" + root_; }

 private:
  Result<void> unavailable(const std::string& what) const {
    return fail(ErrorCode::kNodeUnavailable, "the object store (" + describe() + "): " + what);
  }
  std::string root_;
};

// ---- s3: an S3-compatible API through libcurl ----

struct CurlFree {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

constexpr const char* kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// "%XX" for every byte but S3's unreserved ones and '/' (keys are plain already; this is a
/// guard).
std::string uri_encode_path(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

class S3Store final : public ObjectStore {
 public:
  S3Store(std::string bucket, std::string prefix, std::string endpoint, std::string region, std::string access,
          std::string secret, std::string token)
      : bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        endpoint_(std::move(endpoint)),
        region_(std::move(region)),
        userpwd_(access + ":" + secret),
        token_(std::move(token)) {}

  Result<void> put_file(const std::string& key, const std::string& path, const std::string& sha256_hex) override {
    if (!valid_key(key)) return bad_key(key);
    return with_retries([&]() -> Result<long> {
      FILE* in = std::fopen(path.c_str(), "rb");
      if (!in) return fail(ErrorCode::kInternal, "opening " + path + ": " + std::strerror(errno));
      ScopeExit close_in([in] { std::fclose(in); });
      struct stat st {};
      ::fstat(::fileno(in), &st);
      return request("PUT", key, sha256_hex, [&](CURL* c) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READDATA, in);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(st.st_size));
      });
    }, key, {200});
  }

  Result<void> get_file(const std::string& key, const std::string& path) override {
    if (!valid_key(key)) return bad_key(key);
    return with_retries([&]() -> Result<long> {
      FILE* out = std::fopen(path.c_str(), "wb");
      if (!out) return fail(ErrorCode::kInternal, "creating " + path + ": " + std::strerror(errno));
      ScopeExit close_out([out] { std::fclose(out); });
      return request("GET", key, kEmptySha256, [&](CURL* c) {
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, nullptr);  // fwrite
      });
    }, key, {200});
  }

  Result<bool> exists(const std::string& key) override {
    if (!valid_key(key)) return fail(bad_key(key).error());
    auto r = with_retries([&]() -> Result<long> {
      return request("HEAD", key, kEmptySha256, [](CURL* c) { curl_easy_setopt(c, CURLOPT_NOBODY, 1L); });
    }, key, {200});
    if (r) return true;
    if (r.error().code == ErrorCode::kNotFound) return false;
    return fail(r.error());
  }

  Result<void> remove(const std::string& key) override {
    if (!valid_key(key)) return bad_key(key);
    auto r = with_retries([&]() -> Result<long> {
      return request("DELETE", key, kEmptySha256, [](CURL* c) { curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE"); });
    }, key, {200, 204});
    if (!r && r.error().code == ErrorCode::kNotFound) return {};
    return r;
  }

  std::string describe() const override {
    return "s3://" + bucket_ + (prefix_.empty() ? "" : "/" + prefix_) + (endpoint_.empty() ? "" : " at " + endpoint_);
  }

 private:
  std::string url(const std::string& key) const {
    const std::string path = uri_encode_path((prefix_.empty() ? "" : prefix_ + "/") + key);
    if (!endpoint_.empty()) return endpoint_ + "/" + bucket_ + "/" + path;
    return "https://" + bucket_ + ".s3." + region_ + ".amazonaws.com/" + path;
  }

  /// One request; its HTTP status, or an error when no answer came.
  template <class Setup>
  Result<long> request(const char* method, const std::string& key, const std::string& payload_sha256, Setup setup) {
    std::unique_ptr<CURL, CurlFree> c(curl_easy_init());
    if (!c) return fail(ErrorCode::kInternal, "curl_easy_init failed");
    std::unique_ptr<curl_slist, SlistFree> headers;
    auto add = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
    add("x-amz-content-sha256: " + payload_sha256);  // signed: S3 checks the body against it
    if (!token_.empty()) add("x-amz-security-token: " + token_);
    add("Expect:");  // no 100-continue round trip
    const std::string u = url(key);
    const std::string sigv4 = "aws:amz:" + region_ + ":s3";
    curl_easy_setopt(c.get(), CURLOPT_URL, u.c_str());
    curl_easy_setopt(c.get(), CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(c.get(), CURLOPT_USERPWD, userpwd_.c_str());
    curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    // A transfer that moves less than 1 KiB/s for 30 s has stalled.
    curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c.get(), CURLOPT_FOLLOWLOCATION, 0L);
    char err[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(c.get(), CURLOPT_ERRORBUFFER, err);
    setup(c.get());
    const CURLcode rc = curl_easy_perform(c.get());
    if (rc != CURLE_OK)
      return fail(ErrorCode::kNodeUnavailable, "the object store (" + describe() + "): " + method + " " + key + ": " +
                                                   (err[0] ? err : curl_easy_strerror(rc)));
    long status = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
    return status;
  }

  /// Runs `attempt` up to 3 times while the store cannot be reached or answers 5xx or 429.
  template <class Attempt>
  Result<void> with_retries(Attempt attempt, const std::string& key, std::initializer_list<long> ok) {
    Error last{ErrorCode::kNodeUnavailable, "", 0};
    for (int i = 0; i < 3; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << i));
      auto status = attempt();
      if (status) {
        for (long s : ok)
          if (*status == s) return {};
        if (*status == 404) return fail(ErrorCode::kNotFound, "no object " + key + " in " + describe());
        last = Error{ErrorCode::kNodeUnavailable,
                     "the object store (" + describe() + ") answered HTTP " + std::to_string(*status) + " to " + key, 0};
        if (*status < 500 && *status != 429) break;  // the request is wrong (credentials, bucket): no retry
        continue;
      }
      last = status.error();
      if (last.code != ErrorCode::kNodeUnavailable) break;
    }
    return fail(last);
  }

  const std::string bucket_, prefix_, endpoint_, region_, userpwd_, token_;
};

/// The value of `name` in a query string "a=1&b=2" ("" when absent).
std::string query_value(const std::string& q, const std::string& name) {
  size_t i = 0;
  while (i < q.size()) {
    const size_t amp = std::min(q.find('&', i), q.size());
    const std::string part = q.substr(i, amp - i);
    const size_t eq = part.find('=');
    if (part.substr(0, eq) == name) return eq == std::string::npos ? "" : part.substr(eq + 1);
    i = amp + 1;
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> open_object_store(const std::string& spec) {
  if (spec.rfind("dir:", 0) == 0) {
    const std::string root = spec.substr(4);
    if (root.empty() || root.front() != '/')
      return fail(ErrorCode::kInvalidRequest, "--object-store dir:PATH needs an absolute path, got \"" + spec + "\"");
    std::error_code ec;
    fs::create_directories(root, ec);  // ours: the store's own directory (--object-store dir:)
    if (ec) return fail(ErrorCode::kInvalidRequest, "--object-store " + spec + ": " + ec.message());
    return std::unique_ptr<ObjectStore>(std::make_unique<DirStore>(fs::path(root).lexically_normal().string()));
  }
  if (spec.rfind("s3://", 0) == 0) {
    std::string rest = spec.substr(5), query;
    if (auto q = rest.find('?'); q != std::string::npos) {
      query = rest.substr(q + 1);
      rest.resize(q);
    }
    const size_t slash = rest.find('/');
    const std::string bucket = rest.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (bucket.empty() || bucket.size() > 63 ||
        bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos)
      return fail(ErrorCode::kInvalidRequest, "--object-store " + spec + ": the bucket name must be 1-63 of a-z 0-9 . -");
    if (!prefix.empty() && !valid_key(prefix))
      return fail(ErrorCode::kInvalidRequest, "--object-store " + spec + ": the prefix must be plain path segments");
    std::string endpoint = query_value(query, "endpoint"), region = query_value(query, "region");
    if (region.empty()) region = "us-east-1";
    if (region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
      return fail(ErrorCode::kInvalidRequest, "--object-store " + spec + ": bad region");
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    if (!endpoint.empty() && endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0)
      return fail(ErrorCode::kInvalidRequest, "--object-store " + spec + ": endpoint= must be an http:// or https:// URL");
    const char* access = std::getenv("AWS_ACCESS_KEY_ID");
    const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
    const char* token = std::getenv("AWS_SESSION_TOKEN");
    if (!access || !*access || !secret || !*secret)
      return fail(ErrorCode::kInvalidRequest,
                  "--object-store " + spec + " needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment");
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    return std::unique_ptr<ObjectStore>(
        std::make_unique<S3Store>(bucket, prefix, endpoint, region, access, secret, token ? token : ""));
  }
  return fail(ErrorCode::kInvalidRequest,
              "--object-store must be dir:/PATH or s3://BUCKET[/PREFIX][?endpoint=URL&region=R], got \"" + spec + "\"");
}

}  // namespace b3os::objstore
