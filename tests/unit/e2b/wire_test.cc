// E2B's wire without I/O: Connect envelopes and errors, the request checks, the streaming
// multipart reader.
#include <gtest/gtest.h>

#include <string>

#include "daemon/e2b/multipart.h"
#include "daemon/e2b/wire.h"

namespace b3os::e2b {
namespace {

using nlohmann::json;

TEST(ConnectWire, EnvelopesAreAFlagALengthAndTheMessage) {
  const std::string e = envelope(0, "{}");
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(std::string(e.data() + 1, 4), std::string("\0\0\0\2", 4));
  const std::string end = end_stream(Error{ErrorCode::kSandboxNotFound, "gone", 0});
  EXPECT_EQ(static_cast<uint8_t>(end[0]), kFlagEndStream);
  const json j = json::parse(end.substr(5));
  EXPECT_EQ(j["error"]["code"], "not_found");
  EXPECT_EQ(j["error"]["message"], "gone");
  EXPECT_EQ(json::parse(end_stream(std::nullopt).substr(5)), json::object());
}

TEST(ConnectWire, AStreamRequestIsExactlyOneEnvelopeOfAnObject) {
  EXPECT_EQ((*parse_stream_request(envelope(0, R"({"path":"/x"})"), 1024))["path"], "/x");
  EXPECT_FALSE(parse_stream_request("", 1024));
  EXPECT_FALSE(parse_stream_request(envelope(0, "{}") + "x", 1024));            // trailing bytes
  EXPECT_FALSE(parse_stream_request(envelope(kFlagCompressed, "{}"), 1024));    // compressed
  EXPECT_FALSE(parse_stream_request(envelope(0x80, "{}"), 1024));               // unknown flag
  EXPECT_FALSE(parse_stream_request(envelope(0, "[1]"), 1024));                 // not an object
  auto big = parse_stream_request(envelope(0, std::string(2000, ' ') + "{}"), 1024);
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ErrorCode::kPayloadTooLarge);
  // A length that claims more than was sent.
  std::string lying = envelope(0, "{}");
  lying[4] = 9;
  EXPECT_FALSE(parse_stream_request(lying, 1024));
}

TEST(ConnectWire, CodesAndStatusesFollowTheProtocolTable) {
  EXPECT_EQ(connect_code(ErrorCode::kInvalidRequest), "invalid_argument");
  EXPECT_EQ(connect_code(ErrorCode::kFileNotFound), "not_found");
  EXPECT_EQ(connect_code(ErrorCode::kUnauthorized), "unauthenticated");
  EXPECT_EQ(connect_code(ErrorCode::kNotImplemented), "unimplemented");
  EXPECT_EQ(connect_http_status("invalid_argument"), 400);
  EXPECT_EQ(connect_http_status("not_found"), 404);
  EXPECT_EQ(connect_http_status("already_exists"), 409);
  EXPECT_EQ(connect_http_status("resource_exhausted"), 429);
  EXPECT_EQ(connect_http_status("unimplemented"), 501);
  EXPECT_EQ(connect_http_status("unavailable"), 503);
  EXPECT_EQ(connect_http_status("no such code"), 500);
  // Every code has a Connect name.
  for (int c = 0; c <= static_cast<int>(kLastErrorCode); ++c)
    EXPECT_NE(connect_code(static_cast<ErrorCode>(c)), "unknown") << c;
  EXPECT_EQ(api_error({ErrorCode::kSandboxNotFound, "no", 0}), (json{{"code", 404}, {"message", "no"}}));
}

TEST(ConnectWire, FieldsAreCheckedByTheirProtoAndJsonNames) {
  EXPECT_TRUE(only_fields(json{{"includeEntry", true}, {"path", "/"}}, {"path", "include_entry"}, "m"));
  EXPECT_TRUE(only_fields(json{{"include_entry", true}}, {"path", "include_entry"}, "m"));
  auto bad = only_fields(json{{"pathh", "/"}}, {"path"}, "StatRequest");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("pathh"), std::string::npos);
}

TEST(ConnectWire, BytesAreReadInEveryBase64ProtobufAccepts) {
  EXPECT_EQ(*unbase64("aGk="), "hi");
  EXPECT_EQ(*unbase64("aGk"), "hi");       // unpadded
  EXPECT_EQ(*unbase64("-_8="), "\xfb\xff");  // URL-safe
  EXPECT_EQ(*unbase64(""), "");
  EXPECT_FALSE(unbase64("a"));
  EXPECT_FALSE(unbase64("a!b="));
}

/// A pull over `body` in pieces of `step` bytes (the reader must not care where they cut).
MultipartReader::Pull pieces(const std::string& body, size_t step) {
  auto pos = std::make_shared<size_t>(0);
  return [body, step, pos](char* buf, size_t cap) -> Result<size_t> {
    const size_t n = std::min({step, cap, body.size() - *pos});
    std::copy_n(body.data() + *pos, n, buf);
    *pos += n;
    return n;
  };
}

std::string read_all(MultipartReader& r) {
  std::string out;
  char buf[7];
  for (;;) {
    auto n = r.read(buf, sizeof buf);
    EXPECT_TRUE(n);
    if (!n || *n == 0) return out;
    out.append(buf, *n);
  }
}

TEST(Multipart, PartsAreReadWhateverTheChunksAre) {
  const std::string body =
      "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/w/a.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\nfirst\r\n--Xy not the end\r\n"
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"dir/b%22q%22.txt\"\r\n\r\n"
      "\r\n--XyZ--\r\nepilogue";
  for (size_t step : {1, 2, 3, 5, 16, 4096}) {
    MultipartReader r("XyZ", pieces(body, step));
    auto a = r.next();
    ASSERT_TRUE(a && *a) << step;
    EXPECT_EQ((*a)->name, "file");
    EXPECT_EQ((*a)->filename, "/w/a.txt");
    EXPECT_EQ(read_all(r), "first\r\n--Xy not the end") << step;
    auto b = r.next();
    ASSERT_TRUE(b && *b) << step;
    EXPECT_EQ((*b)->filename, "dir/b\"q\".txt");
    EXPECT_EQ(read_all(r), "") << step;
    auto end = r.next();
    ASSERT_TRUE(end);
    EXPECT_FALSE(*end);
  }
}

TEST(Multipart, AnUnreadPartIsSkippedAndBadBodiesAreErrors) {
  const std::string body = "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n" + std::string(100000, 'x') +
                           "\r\n--b\r\nContent-Disposition: form-data; name=\"g\"\r\n\r\ny\r\n--b--";
  MultipartReader r("b", pieces(body, 1000));
  ASSERT_TRUE(*r.next());
  auto g = r.next();  // the first part's 100000 bytes skipped
  ASSERT_TRUE(g && *g);
  EXPECT_EQ((*g)->name, "g");
  EXPECT_EQ(read_all(r), "y");

  MultipartReader cut("b", pieces("--b\r\n\r\nunfinished", 3));
  ASSERT_TRUE(*cut.next());
  char buf[64];
  Result<size_t> n = size_t{1};
  while (n && *n) n = cut.read(buf, sizeof buf);
  EXPECT_FALSE(n);  // no closing boundary

  MultipartReader none("b", pieces("no boundary here", 4));
  EXPECT_FALSE(none.next());
  MultipartReader huge("b", pieces("--b\r\n" + std::string(20000, 'h'), 512));
  EXPECT_FALSE(huge.next());  // headers past their bound
}

TEST(Multipart, TheBoundaryComesFromTheContentType) {
  EXPECT_EQ(*multipart_boundary("multipart/form-data; boundary=----abc"), "----abc");
  EXPECT_EQ(*multipart_boundary("Multipart/Form-Data; charset=x; boundary=\"a b\""), "a b");
  EXPECT_FALSE(multipart_boundary("multipart/form-data"));
  EXPECT_FALSE(multipart_boundary("text/plain; boundary=x"));
  EXPECT_FALSE(multipart_boundary("multipart/form-data; boundary=" + std::string(71, 'a')));
}

}  // namespace
}  // namespace b3os::e2b
