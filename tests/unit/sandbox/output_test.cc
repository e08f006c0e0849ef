#include "daemon/sandbox/output.h"

#include <gtest/gtest.h>

#include "daemon/sys/codec.h"

namespace b3os::sandbox {
namespace {

TEST(Utf8Tail, FindsAnIncompleteSequenceAtTheEnd) {
  EXPECT_EQ(sys::utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(sys::utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(sys::utf8_incomplete_tail("a\xe2\x82\xac"), 0u);  // complete
  EXPECT_EQ(sys::utf8_incomplete_tail("a\xe2\x82"), 2u);
  EXPECT_EQ(sys::utf8_incomplete_tail("a\xe2"), 1u);
  EXPECT_EQ(sys::utf8_incomplete_tail("\xf0\x9f\x98"), 3u);
  EXPECT_EQ(sys::utf8_incomplete_tail("\xff"), 0u);  // not a lead byte at all
}

TEST(OutputEncoder, CarriesACharacterCutBetweenChunks) {
  OutputEncoder enc;
  auto a = enc.chunk(false, "price: \xe2\x82");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["data"], "price: ");
  EXPECT_FALSE(a->contains("encoding"));
  EXPECT_EQ(enc.carried(false), 2u);
  auto b = enc.chunk(false, "\xac!");
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)["data"], "\xe2\x82\xac!");
  EXPECT_EQ(enc.carried(false), 0u);
}

TEST(OutputEncoder, Base64ForBytesThatAreNotText) {
  OutputEncoder enc;
  auto a = enc.chunk(true, std::string("a\xff\xfe", 3));
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)["encoding"], "base64");
  EXPECT_EQ(sys::base64_decode((*a)["data"].get<std::string>()), std::string("a\xff\xfe", 3));
}

TEST(OutputEncoder, StreamsCarrySeparatelyAndFlushAsBase64) {
  OutputEncoder enc;
  EXPECT_FALSE(enc.chunk(false, "\xe2"));  // all carried
  auto e = enc.chunk(true, "err");
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)["data"], "err");
  auto f = enc.flush(false);
  ASSERT_TRUE(f);
  EXPECT_EQ((*f)["encoding"], "base64");
  EXPECT_FALSE(enc.flush(false));
}

// append_event writes what sse_event(name, *chunk(...)) writes, whatever the bytes and however
// they are cut: text, escapes, characters cut at every place, bytes that are not UTF-8.
TEST(OutputEncoder, AppendEventMatchesTheJsonPath) {
  std::string sample = "plain \"quoted\" back\\slash\ttab\nline\r\x01\x1f end ";
  sample += "\xe2\x82\xac euro \xf0\x9f\x98\x80 smile \xc3\xa9";
  std::string bad = sample + std::string("\xff\xfe", 2) + sample;
  for (const std::string& input : {sample, bad, std::string(300000, 'x') + "\xe2\x82\xac"}) {
    for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{7}, size_t{64}, input.size()}) {
      OutputEncoder a, b;
      for (size_t at = 0; at < input.size(); at += step) {
        const bool err = (at / step) % 3 == 2;
        const std::string_view part = std::string_view(input).substr(at, step);
        auto j = a.chunk(err, part);
        std::string got;
        const bool any = b.append_event(got, err, part);
        ASSERT_EQ(any, j.has_value()) << "step " << step << " at " << at;
        if (j) {
          ASSERT_EQ(got, sse_event(err ? "stderr" : "stdout", *j)) << "step " << step << " at " << at;
        }
        ASSERT_EQ(a.carried(err), b.carried(err));
      }
    }
  }
}

TEST(Sse, EventsWithAndWithoutId) {
  EXPECT_EQ(sse_event("exit", nlohmann::json{{"exit_code", 0}}), "event: exit\ndata: {\"exit_code\":0}\n\n");
  EXPECT_EQ(sse_event("stdout", nlohmann::json{{"data", "a\nb"}}, 4), "id: 4\nevent: stdout\ndata: {\"data\":\"a\\nb\"}\n\n");
}

TEST(JsonText, SameBytesAsNlohmannDump) {
  using nlohmann::json;
  std::string every;  // every byte value that is valid alone in UTF-8, and some characters
  for (int c = 0; c < 0x80; ++c) every += static_cast<char>(c);
  every += "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\ \" / \x7f";
  const json cases[] = {
      json{{"data", every}, {"offset", 12}, {"encoding", nullptr}},
      json::array({1, -2, 3.5, true, false, nullptr, "x", json::object(), json::array()}),
      json{{"nested", {{"a", {1, 2, {{"b", "c\td"}}}}}}, {"empty", ""}},
      json("\xff\xfe not UTF-8"),  // nlohmann's replacement characters, as before
      json{{"k\"ey\n", "v"}},
      json(std::string(300000, 'z') + "\n" + std::string(5, '"')),
  };
  for (const auto& j : cases) EXPECT_EQ(json_text(j), j.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace
}  // namespace b3os::sandbox
