#pragma once
// HttpClient: a synchronous HTTP/1.1 client for the b3osd API (plain HTTP, one connection per
// request), built on Boost.Beast. Uploads and downloads stream in fixed-size chunks, so file
// size does not matter.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <functional>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "common/result.h"

namespace b3os::cli {

/// A response as the CLI needs it. For a streamed download with a 2xx status `body` is empty.
struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

/// Receives the bytes of a download; opened only once a 2xx status has arrived.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  /// Called once, before the first write, when the response status is 2xx.
  virtual Result<void> open() = 0;
  /// Takes the next chunk of the body.
  virtual Result<void> write(const char* data, size_t size) = 0;
};

class HttpClient {
 public:
  /// Largest JSON (or error) body the client accepts; exec output is capped well below this.
  static constexpr uint64_t kMaxJsonBody = 256ull << 20;
  /// Chunk size for streamed uploads and downloads.
  static constexpr size_t kChunkSize = 256 << 10;

  /// A client for `url`; `api_key` is sent as a Bearer token unless empty.
  HttpClient(ApiUrl url, std::string api_key);

  /// Sends `method path` with an optional JSON body (nullptr: none) and reads the whole reply.
  Result<HttpResponse> request(std::string_view method, const std::string& path, const Json* body);

  /// Sends `method path` with a raw body and extra headers; the reply with the headers named
  /// in `want_headers` copied into `headers_out` (for `b3os mcp`: Mcp-Session-Id). With
  /// `on_body`, the body is handed over as it arrives (an event stream), with the reply's head.
  Result<HttpResponse> exchange(std::string_view method, const std::string& path, const std::string& body,
                                const std::vector<std::pair<std::string, std::string>>& headers,
                                const std::vector<std::string>& want_headers,
                                std::vector<std::pair<std::string, std::string>>* headers_out,
                                const std::function<void(const HttpResponse& head, std::string_view chunk)>& on_body = {});

  /// Sends the file at `local_path` as the body (PUT application/octet-stream unless told
  /// otherwise), streamed from disk in chunks, with Content-Length.
  Result<HttpResponse> upload(const std::string& path, const std::string& local_path,
                              std::string_view method = "PUT",
                              std::string_view content_type = "application/octet-stream");

  /// GETs `path`, streaming a 2xx body into `sink` as it arrives (a followed log shows each
  /// line when it comes); other statuses keep their body in the reply.
  Result<HttpResponse> download(const std::string& path, ByteSink& sink);

  /// The API URL as the user gave it, for messages.
  const std::string& url() const { return url_.original; }
  /// Whether a key will be sent.
  bool has_api_key() const { return !api_key_.empty(); }

 private:
  ApiUrl url_;
  std::string api_key_;
};

/// The error an API reply stands for: "code: message" from `{"error": {...}}`, or the status
/// and the start of the body when the reply is not the API's error shape.
Error api_error(const HttpResponse& resp);

/// Parses a 2xx JSON reply; any other status becomes api_error().
Result<Json> json_reply(const HttpResponse& resp);

/// Serializes a request body; fails (instead of throwing) on strings that are not UTF-8.
Result<std::string> dump_json(const Json& body);

/// Maps an API error code name to the ErrorCode enum (kInternal if unknown).
ErrorCode error_code_from_name(std::string_view name);

}  // namespace b3os::cli
