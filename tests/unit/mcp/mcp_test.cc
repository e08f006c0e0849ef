#include <gtest/gtest.h>

#include "daemon/mcp/jsonrpc.h"
#include "daemon/mcp/server.h"
#include "daemon/mcp/tools.h"

namespace b3os::mcp {
namespace {

TEST(JsonRpc, RequestNotificationResponse) {
  auto r = parse_message(R"({"jsonrpc":"2.0","id":7,"method":"tools/list"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Message::Kind::kRequest);
  EXPECT_EQ(r->id, 7);
  EXPECT_TRUE(r->params.is_object());
  auto n = parse_message(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->kind, Message::Kind::kNotification);
  auto s = parse_message(R"({"jsonrpc":"2.0","id":"a","result":{}})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, Message::Kind::kResponse);
}

TEST(JsonRpc, Refusals) {
  auto batch = parse_message(R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])");
  ASSERT_FALSE(batch);
  EXPECT_EQ(batch.error().code, kInvalidRequest);
  EXPECT_EQ(parse_message("{").error().code, kParseError);
  EXPECT_EQ(parse_message(R"({"id":1,"method":"ping"})").error().code, kInvalidRequest);         // no jsonrpc
  EXPECT_EQ(parse_message(R"({"jsonrpc":"1.0","id":1,"method":"ping"})").error().code, kInvalidRequest);
  EXPECT_EQ(parse_message(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})").error().code, kInvalidRequest);
  EXPECT_EQ(parse_message(R"({"jsonrpc":"2.0","id":{},"method":"ping"})").error().code, kInvalidRequest);
  auto params = parse_message(R"({"jsonrpc":"2.0","id":3,"method":"ping","params":[1]})");
  EXPECT_EQ(params.error().code, kInvalidParams);
  EXPECT_EQ(params.error().id, 3);  // the answer names the request when it can
  EXPECT_EQ(parse_message(R"({"jsonrpc":"2.0","id":1})").error().code, kInvalidRequest);  // neither
  EXPECT_EQ(parse_message(std::string(100, '[') + std::string(100, ']')).error().code, kParseError);
}

TEST(Origin, LoopbackPagesAndTheAllowedOnes) {
  EXPECT_TRUE(origin_allowed("", {}));  // not a browser
  EXPECT_TRUE(origin_allowed("http://localhost:6274", {}));
  EXPECT_TRUE(origin_allowed("http://127.0.0.1", {}));
  EXPECT_TRUE(origin_allowed("https://[::1]:8443", {}));
  EXPECT_TRUE(origin_allowed("https://App.Example.com", {"https://app.example.com"}));
  EXPECT_FALSE(origin_allowed("https://evil.example", {"https://app.example.com"}));
  EXPECT_FALSE(origin_allowed("http://localhost.evil.example", {}));
  EXPECT_FALSE(origin_allowed("http://127.0.0.1.evil.example", {}));
  EXPECT_FALSE(origin_allowed("http://localhost:80x", {}));
  EXPECT_FALSE(origin_allowed("null", {}));
  EXPECT_FALSE(origin_allowed("file://", {}));
}

TEST(Versions, TheThreeRevisions) {
  EXPECT_TRUE(supported_version("2025-11-25"));
  EXPECT_TRUE(supported_version("2025-06-18"));
  EXPECT_TRUE(supported_version("2025-03-26"));
  EXPECT_FALSE(supported_version("2024-11-05"));
  EXPECT_FALSE(supported_version(""));
}

TEST(Encodings, Base64StrictAndUtf8) {
  EXPECT_EQ(base64_decode("aGk="), "hi");
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_encode(std::string("\0\xff", 2)), "AP8=");
  EXPECT_FALSE(base64_decode("aGk"));    // no padding
  EXPECT_FALSE(base64_decode("aG k="));  // whitespace
  EXPECT_FALSE(base64_decode("aGl="));   // not canonical
  EXPECT_FALSE(base64_decode("a==="));
  EXPECT_TRUE(valid_utf8("héllo"));
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\xc3"));          // cut short
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));  // a surrogate
}

}  // namespace
}  // namespace b3os::mcp

namespace b3os::mcp {
namespace {
TEST(JsonRpc, LongStringIdRefused) {
  const std::string id(300, 'x');
  auto r = parse_message(R"({"jsonrpc":"2.0","id":")" + id + R"(","method":"ping"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, kInvalidRequest);
  EXPECT_TRUE(parse_message(R"({"jsonrpc":"2.0","id":")" + std::string(256, 'x') + R"(","method":"ping"})"));
}
}  // namespace
}  // namespace b3os::mcp
