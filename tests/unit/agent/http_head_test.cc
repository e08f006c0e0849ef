// Tests of the in-sandbox relay's HTTP/1.1 head handling (agent/http_head.h). Everything here
// is written by untrusted code inside a sandbox, so most tests are about what must be refused,
// and about there being exactly one reading of where a request's body starts and ends.

#include "agent/http_head.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace b3os::agent {
namespace {

using namespace std::string_literals;

constexpr uint64_t kMaxBody = 4u << 20;

HttpRequestHead parse_ok(std::string_view head) {
  auto r = parse_request_head(head);
  EXPECT_TRUE(r.has_value()) << "refused: " << (r ? "" : r.error().message) << "\n" << head;
  return r ? *r : HttpRequestHead{};
}

// The error a head is refused with (status 0 if it was accepted).
HttpError parse_error(std::string_view head) {
  auto r = parse_request_head(head);
  if (r) return HttpError{0, "", ""};
  return r.error();
}

// The body length of a head that parses, or the status it is refused with (as a negative).
int64_t body_length(std::string_view head, uint64_t max_body = kMaxBody) {
  auto h = parse_request_head(head);
  if (!h) return -h.error().status;
  auto n = request_body_length(*h, max_body);
  if (!n) return -n.error().status;
  return static_cast<int64_t>(*n);
}

// ---- find_head_end ---------------------------------------------------------------------------

TEST(HttpHeadEndTest, CrlfHead) {
  const std::string head = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(find_head_end(head), head.size());
  EXPECT_EQ(find_head_end(head + "body bytes"), head.size());
}

TEST(HttpHeadEndTest, BareLfHead) {
  const std::string head = "GET / HTTP/1.1\nHost: x\n\n";
  EXPECT_EQ(find_head_end(head), head.size());
}

TEST(HttpHeadEndTest, MixedLineEndings) {
  const std::string a = "GET / HTTP/1.1\r\nHost: x\n\r\n";
  const std::string b = "GET / HTTP/1.1\nHost: x\r\n\n";
  EXPECT_EQ(find_head_end(a + "body"), a.size());
  EXPECT_EQ(find_head_end(b + "body"), b.size());
}

TEST(HttpHeadEndTest, IncompleteHead) {
  EXPECT_EQ(find_head_end(""), std::nullopt);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1"), std::nullopt);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n"), std::nullopt);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n\r"), std::nullopt);
}

TEST(HttpHeadEndTest, BareCrIsNotALineEnd) {
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\r"), std::nullopt);
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\n\rX: y\r\n"), std::nullopt);
}

TEST(HttpHeadEndTest, LeadingBlankLinesAreNotTheEnd) {
  // RFC 9112 2.2: blank lines before the request line are skipped, not taken as an empty head.
  EXPECT_EQ(find_head_end("\r\n"), std::nullopt);
  EXPECT_EQ(find_head_end("\r\n\r\n\n\n"), std::nullopt);
  const std::string buf = "\r\n\r\nGET / HTTP/1.1\r\n\r\n";
  EXPECT_EQ(find_head_end(buf), buf.size());
  EXPECT_EQ(parse_ok(buf.substr(0, *find_head_end(buf))).path, "/");
}

TEST(HttpHeadEndTest, PipelinedRequestsEndAtTheFirstHead) {
  const std::string first = "POST /v1/infer/a HTTP/1.1\r\nContent-Length: 2\r\n\r\n";
  const std::string buf = first + "{}" + "GET /second HTTP/1.1\r\n\r\n";
  const auto end = find_head_end(buf);
  ASSERT_EQ(end, first.size());
  const auto head = parse_ok(std::string_view(buf).substr(0, *end));
  EXPECT_EQ(head.path, "/v1/infer/a");
  EXPECT_EQ(request_body_length(head, kMaxBody), 2u);
}

// The relay searches again after each read with `from` = what it had before; the answer must be
// the one a single search of the whole buffer gives, wherever the reads split the bytes.
TEST(HttpHeadEndTest, ResumedSearchMatchesOneSearchAtEverySplit) {
  const std::string heads[] = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\nrest",
      "GET / HTTP/1.1\nHost: x\n\nrest",
      "GET / HTTP/1.1\r\nA: b\n\r\nrest",
      "\r\n\n\r\nGET / HTTP/1.1\r\n\r\n",
      "G\n\n",
  };
  for (const std::string& whole : heads) {
    const auto want = find_head_end(whole);
    ASSERT_TRUE(want.has_value()) << whole;
    for (size_t a = 0; a <= whole.size(); ++a) {
      for (size_t b = a; b <= whole.size(); ++b) {
        // Three reads: [0,a), [a,b), [b,end).
        std::optional<size_t> got;
        size_t scanned = 0;
        for (size_t upto : {a, b, whole.size()}) {
          if (got) break;
          got = find_head_end(std::string_view(whole).substr(0, upto), scanned);
          scanned = upto;
        }
        ASSERT_EQ(got, want) << "split at " << a << "," << b << " of " << whole;
      }
    }
  }
}

TEST(HttpHeadEndTest, FromBeyondTheBufferIsHarmless) {
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\n\r\n", 1000), std::nullopt);
}

// ---- parse_request_head: what is accepted ----------------------------------------------------

TEST(HttpHeadParseTest, SimpleGet) {
  const auto h = parse_ok("GET /v1/infer/models HTTP/1.1\r\nHost: 127.0.0.1:7700\r\n\r\n");
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.path, "/v1/infer/models");
  EXPECT_EQ(h.query, "");
  EXPECT_TRUE(h.http11);
  ASSERT_EQ(h.headers.size(), 1u);
  EXPECT_EQ(h.headers[0].first, "host");
  EXPECT_EQ(h.headers[0].second, "127.0.0.1:7700");
}

TEST(HttpHeadParseTest, PostWithHeadersInOrderLowerCasedAndTrimmed) {
  const auto h = parse_ok(
      "POST /v1/infer/chat/completions?stream=1&x=y HTTP/1.1\r\n"
      "Content-Type:application/json\r\n"
      "X-Trace: \t t-1 \t\r\n"
      "Content-Length: 2\r\n"
      "\r\n");
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.path, "/v1/infer/chat/completions");
  EXPECT_EQ(h.query, "stream=1&x=y");
  ASSERT_EQ(h.headers.size(), 3u);
  EXPECT_EQ(h.headers[0], (std::pair<std::string, std::string>{"content-type", "application/json"}));
  EXPECT_EQ(h.headers[1], (std::pair<std::string, std::string>{"x-trace", "t-1"}));
  EXPECT_EQ(h.headers[2], (std::pair<std::string, std::string>{"content-length", "2"}));
  ASSERT_NE(h.find("x-trace"), nullptr);
  EXPECT_EQ(*h.find("x-trace"), "t-1");
  EXPECT_EQ(h.find("X-Trace"), nullptr);  // find takes the lower-case name
  EXPECT_EQ(h.find("accept"), nullptr);
}

TEST(HttpHeadParseTest, FindReturnsTheFirstOfRepeatedFields) {
  const auto h = parse_ok("GET / HTTP/1.1\r\nAccept: a\r\naccept: b\r\n\r\n");
  ASSERT_NE(h.find("accept"), nullptr);
  EXPECT_EQ(*h.find("accept"), "a");
  EXPECT_EQ(h.headers.size(), 2u);
}

TEST(HttpHeadParseTest, BareLfLinesAndHttp10) {
  const auto h = parse_ok("GET /p?q HTTP/1.0\nA: 1\n\n");
  EXPECT_FALSE(h.http11);
  EXPECT_EQ(h.path, "/p");
  EXPECT_EQ(h.query, "q");
  ASSERT_NE(h.find("a"), nullptr);
  EXPECT_EQ(*h.find("a"), "1");
}

TEST(HttpHeadParseTest, EmptyValueAndEmptyQuery) {
  const auto h = parse_ok("GET /p? HTTP/1.1\r\nX-Empty:\r\nX-Blank:   \r\n\r\n");
  EXPECT_EQ(h.path, "/p");
  EXPECT_EQ(h.query, "");
  ASSERT_EQ(h.headers.size(), 2u);
  EXPECT_EQ(h.headers[0].second, "");
  EXPECT_EQ(h.headers[1].second, "");
}

TEST(HttpHeadParseTest, ColonsInTheValueStayThere) {
  const auto h = parse_ok("GET / HTTP/1.1\r\nX-Url: http://a:1/b?c=d:e\r\n\r\n");
  EXPECT_EQ(h.headers.at(0).second, "http://a:1/b?c=d:e");
}

TEST(HttpHeadParseTest, ObsTextInValuesAndTargetIsKept) {
  const auto h = parse_ok("GET /caf\xc3\xa9 HTTP/1.1\r\nX-Name: \xc3\xa9t\xc3\xa9\xff\r\n\r\n");
  EXPECT_EQ(h.path, "/caf\xc3\xa9");
  EXPECT_EQ(h.headers.at(0).second, "\xc3\xa9t\xc3\xa9\xff");
}

TEST(HttpHeadParseTest, AbsoluteFormIsReducedToOriginForm) {
  auto h = parse_ok("POST http://127.0.0.1:7700/v1/infer/chat/completions?a=b HTTP/1.1\r\n\r\n");
  EXPECT_EQ(h.path, "/v1/infer/chat/completions");
  EXPECT_EQ(h.query, "a=b");
  h = parse_ok("GET HTTPS://Example.COM HTTP/1.1\r\n\r\n");
  EXPECT_EQ(h.path, "/");
  EXPECT_EQ(h.query, "");
}

TEST(HttpHeadParseTest, TextAfterTheHeadIsNotParsed) {
  // A caller may pass more than the head (a body, a pipelined request): the head ends at the
  // first blank line and what follows is never read as header fields.
  const auto h = parse_ok("GET / HTTP/1.1\r\nA: 1\r\n\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(h.headers.size(), 1u);
  EXPECT_EQ(h.find("transfer-encoding"), nullptr);
}

TEST(HttpHeadParseTest, ManyHeadersUpToTheHeadLimit) {
  std::string head = "GET / HTTP/1.1\r\n";
  while (head.size() + 16 < kMaxRequestHead) head += "X-A: " + std::to_string(head.size()) + "\r\n";
  head += "\r\n";
  ASSERT_LE(head.size(), kMaxRequestHead);
  EXPECT_EQ(find_head_end(head), head.size());
  const auto h = parse_ok(head);
  EXPECT_GT(h.headers.size(), 4000u);
  EXPECT_EQ(h.headers.back().first, "x-a");
}

// ---- parse_request_head: what is refused -----------------------------------------------------

TEST(HttpHeadParseTest, EmptyRequests) {
  EXPECT_EQ(parse_error("").status, 400);
  EXPECT_EQ(parse_error("\r\n\r\n").status, 400);
  EXPECT_EQ(parse_error("\n").status, 400);
}

TEST(HttpHeadParseTest, MalformedRequestLines) {
  const char* bad[] = {
      "BLAH\r\n\r\n",
      "GET\r\n\r\n",
      "GET /\r\n\r\n",
      "GET  / HTTP/1.1\r\n\r\n",         // two spaces: an empty target
      "GET / HTTP/1.1 \r\n\r\n",         // trailing space
      " GET / HTTP/1.1\r\n\r\n",         // leading space
      "GET / HTTP/1.1 extra\r\n\r\n",
      "GET\t/\tHTTP/1.1\r\n\r\n",        // tabs do not separate
      "G(T / HTTP/1.1\r\n\r\n",          // not a token
      "GET / http/1.1\r\n\r\n",
      "GET / HTTP/1.2\r\n\r\n",
      "GET / HTTP/2\r\n\r\n",
      "GET / HTTP/1.1x\r\n\r\n",
      "GET v1/infer HTTP/1.1\r\n\r\n",   // not origin form
      "OPTIONS * HTTP/1.1\r\n\r\n",      // asterisk form is not relayed
      "GET ftp://h/p HTTP/1.1\r\n\r\n",
      "GET http:// HTTP/1.1\r\n\r\n",
      "GET /a\x7f HTTP/1.1\r\n\r\n",
  };
  for (const char* head : bad) {
    const HttpError e = parse_error(head);
    EXPECT_EQ(e.status, 400) << head;
    EXPECT_EQ(e.code, "invalid_request") << head;
    EXPECT_FALSE(e.message.empty()) << head;
  }
}

TEST(HttpHeadParseTest, NulBytesAreRefusedEverywhere) {
  const std::string bad[] = {
      "GE\0T / HTTP/1.1\r\n\r\n"s,
      "GET /a\0b HTTP/1.1\r\n\r\n"s,
      "GET /a?q=\0 HTTP/1.1\r\n\r\n"s,
      "GET / HTTP/1.1\0\r\n\r\n"s,
      "GET / HTTP/1.1\r\nX-\0A: 1\r\n\r\n"s,
      "GET / HTTP/1.1\r\nX-A: 1\0\r\n\r\n"s,
      "GET / HTTP/1.1\r\nX-A: \0\r\n\r\n"s,
      "GET / HTTP/1.1\r\n\0\r\n\r\n"s,
  };
  for (const std::string& head : bad) {
    EXPECT_EQ(parse_error(head).status, 400) << testing::PrintToString(head);
  }
  // A NUL in a name would slip a credential past the relay's filter for any reader that
  // stops at the NUL: "authorization\0" is not "authorization".
  EXPECT_EQ(parse_error("POST / HTTP/1.1\r\nAuthorization\0: Bearer x\r\n\r\n"s).status, 400);
  EXPECT_EQ(parse_error("POST / HTTP/1.1\r\nContent-Length\0: 5\r\n\r\n"s).status, 400);
}

TEST(HttpHeadParseTest, BareCrIsRefused) {
  // A CR that does not end a line could end one for another parser: refuse rather than guess.
  EXPECT_EQ(parse_error("GET / HTTP/1.1\r\nX-A: 1\rX-B: 2\r\n\r\n").status, 400);
  EXPECT_EQ(parse_error("GET /a\rb HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse_error("GET / HTTP/1.1\r\r\n\r\n").status, 400);
  EXPECT_EQ(parse_error("GET / HTTP/1.1\r\n\rX-A: 1\r\n\r\n").status, 400);
}

TEST(HttpHeadParseTest, ObsFoldIsRefused) {
  const HttpError e = parse_error("GET / HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("folded"), std::string::npos) << e.message;
  EXPECT_EQ(parse_error("GET / HTTP/1.1\r\nX-A: 1\r\n\tcontinued\r\n\r\n").status, 400);
  // Folding a Content-Length would otherwise hide a second value from some readers.
  EXPECT_EQ(parse_error("POST / HTTP/1.1\r\nContent-Length: 1\r\n 0\r\n\r\n").status, 400);
}

TEST(HttpHeadParseTest, MalformedHeaderLines) {
  const char* bad[] = {
      "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
      "GET / HTTP/1.1\r\n: no name\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",  // RFC 9112 5.1: no space before ':'
      "GET / HTTP/1.1\r\nContent-Length\t: 5\r\n\r\n",
      "GET / HTTP/1.1\r\nX A: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nX(A): 1\r\n\r\n",
      "GET / HTTP/1.1\r\nX\xc3\xa9: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nX-A: a\x01z\r\n\r\n",
      "GET / HTTP/1.1\r\nX-A: a\x7fz\r\n\r\n",
  };
  for (const char* head : bad) {
    EXPECT_EQ(parse_error(head).status, 400) << head;
  }
}

// ---- request_body_length ---------------------------------------------------------------------

TEST(HttpBodyLengthTest, NoFramingMeansNoBody) {
  EXPECT_EQ(body_length("GET / HTTP/1.1\r\n\r\n"), 0);
  EXPECT_EQ(body_length("POST / HTTP/1.0\r\n\r\n"), 0);
}

TEST(HttpBodyLengthTest, ContentLength) {
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n"), 2);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\ncontent-LENGTH:0\r\n\r\n"), 0);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length:   17   \r\n\r\n"), 17);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 007\r\n\r\n"), 7);
}

TEST(HttpBodyLengthTest, TheLimitIsInclusive) {
  const std::string at = "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(kMaxBody) + "\r\n\r\n";
  const std::string over =
      "POST / HTTP/1.1\r\nContent-Length: " + std::to_string(kMaxBody + 1) + "\r\n\r\n";
  EXPECT_EQ(body_length(at), static_cast<int64_t>(kMaxBody));
  EXPECT_EQ(body_length(over), -413);
  auto h = parse_ok(over);
  auto n = request_body_length(h, kMaxBody);
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().code, "payload_too_large");
  EXPECT_NE(n.error().message.find(std::to_string(kMaxBody)), std::string::npos);
}

TEST(HttpBodyLengthTest, MalformedContentLength) {
  const char* bad[] = {
      "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5;q=1\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5,\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: ,5\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: ١٢\r\n\r\n",  // Arabic-Indic digits are not DIGIT
  };
  for (const char* head : bad) {
    auto h = parse_request_head(head);
    ASSERT_TRUE(h.has_value()) << head;
    auto n = request_body_length(*h, kMaxBody);
    ASSERT_FALSE(n.has_value()) << head;
    EXPECT_EQ(n.error().status, 400) << head;
    EXPECT_EQ(n.error().code, "invalid_request") << head;
  }
}

TEST(HttpBodyLengthTest, RepeatedEqualValuesAreOneLength) {
  // RFC 9110 8.6: a list of one repeated value may be taken as that value.
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 42, 42\r\n\r\n"), 42);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 42\r\nContent-Length: 42\r\n\r\n"), 42);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 42\r\nContent-Length: 42,42 , 42\r\n\r\n"),
            42);
}

TEST(HttpBodyLengthTest, ConflictingValuesAreRefused) {
  // Two readings of where the body ends is how requests are smuggled: never pick one.
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 42, 43\r\n\r\n"), -400);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n"), -400);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 5\r\nX: y\r\nContent-Length: 0\r\n\r\n"),
            -400);
  // A conflict is refused even when one of the values is also too large.
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n"
                        "Content-Length: 5\r\n\r\n"),
            -400);
}

TEST(HttpBodyLengthTest, TransferEncodingIsRefusedWithOrWithoutContentLength) {
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), -411);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            -411);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"),
            -411);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nTRANSFER-ENCODING: identity\r\n\r\n"), -411);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n"), -411);
  EXPECT_EQ(body_length("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), -411);
  auto h = parse_ok("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  auto n = request_body_length(h, kMaxBody);
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().code, "length_required");
  // A name that only looks like it (a space before the colon) is a malformed head, not a
  // header some other reader might take as Transfer-Encoding.
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n"),
            -400);
}

TEST(HttpBodyLengthTest, AbsurdLengthsDoNotOverflow) {
  const char* huge[] = {
      "18446744073709551615",   // UINT64_MAX
      "18446744073709551616",   // UINT64_MAX + 1
      "99999999999999999999999999999999999999999999999999",
      "999999999999999999",     // 18 digits, converted exactly
  };
  for (const char* n : huge) {
    const std::string head = std::string("POST / HTTP/1.1\r\nContent-Length: ") + n + "\r\n\r\n";
    EXPECT_EQ(body_length(head), -413) << n;
    // With no limit worth the name: the exact value or 413, never a wrapped small number.
    auto r = request_body_length(parse_ok(head), UINT64_MAX);
    if (r) {
      EXPECT_EQ(std::to_string(*r), n);
    } else {
      EXPECT_EQ(r.error().status, 413) << n;
    }
  }
  const std::string big(100000, '9');
  auto h = parse_ok("POST / HTTP/1.1\r\nContent-Length: " + big + "\r\n\r\n");
  auto r = request_body_length(h, UINT64_MAX);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().status, 413);
}

TEST(HttpBodyLengthTest, LeadingZerosDoNotMakeALengthLarge) {
  const std::string zeros(30, '0');
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: " + zeros + "5\r\n\r\n"), 5);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: " + zeros + "\r\n\r\n"), 0);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 5, " + zeros + "5\r\n\r\n"), 5);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 000\r\n\r\n"), 0);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 5, " + zeros + "6\r\n\r\n"), -400);
}

TEST(HttpBodyLengthTest, DifferentHugeValuesConflict) {
  // Both are past any limit, but they still say two different things: 400, not 413.
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999, "
                        "88888888888888888888\r\n\r\n"),
            -400);
  EXPECT_EQ(body_length("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n"
                        "Content-Length: 99999999999999999999\r\n\r\n"),
            -413);
}

TEST(HttpBodyLengthTest, ExactTo64Bits) {
  auto at_max = request_body_length(
      parse_ok("POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n"), UINT64_MAX);
  ASSERT_TRUE(at_max.has_value());
  EXPECT_EQ(*at_max, UINT64_MAX);
  auto past = request_body_length(
      parse_ok("POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n"), UINT64_MAX);
  ASSERT_FALSE(past.has_value());
  EXPECT_EQ(past.error().status, 413);
}

// ---- relayed_request_headers -----------------------------------------------------------------

TEST(HttpRelayedHeadersTest, ConnectionFramingAndCredentialsAreDropped) {
  const auto h = parse_ok(
      "POST /v1/infer/x HTTP/1.1\r\n"
      "Host: 127.0.0.1:7700\r\n"
      "Connection: keep-alive\r\n"
      "Content-Length: 2\r\n"
      "Authorization: Bearer sk-not-for-the-daemon\r\n"
      "Proxy-Authorization: Basic eA==\r\n"
      "Proxy-Connection: close\r\n"
      "Keep-Alive: 5\r\n"
      "Expect: 100-continue\r\n"
      "TE: trailers\r\n"
      "Trailer: X\r\n"
      "Upgrade: h2c\r\n"
      "Content-Type: application/json\r\n"
      "X-Trace: t-1\r\n"
      "\r\n");
  EXPECT_EQ(relayed_request_headers(h),
            (Json{{"content-type", "application/json"}, {"x-trace", "t-1"}}));
}

TEST(HttpRelayedHeadersTest, RepeatedFieldsAreJoined) {
  const auto h = parse_ok("GET / HTTP/1.1\r\nAccept: a\r\nX: 1\r\nACCEPT: b\r\n\r\n");
  EXPECT_EQ(relayed_request_headers(h), (Json{{"accept", "a, b"}, {"x", "1"}}));
}

TEST(HttpRelayedHeadersTest, InvalidUtf8IsReplacedWhenSent) {
  const auto h = parse_ok("GET / HTTP/1.1\r\nX-Bin: a\xff\r\n\r\n");
  const std::string wire = dump_json(relayed_request_headers(h));
  EXPECT_EQ(Json::parse(wire).at("x-bin"), "a\xef\xbf\xbd");
}

// ---- response_head ---------------------------------------------------------------------------

TEST(HttpResponseHeadTest, StatusLineHeadersAndClose) {
  const auto r = response_head(Json{{"status", 200},
                                    {"headers",
                                     {{"content-type", "text/event-stream"},
                                      {"set-cookie", {"a=1", "b=2"}},
                                      {"x-n", 5}}}});
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(*r,
            "HTTP/1.1 200 OK\r\n"
            "content-type: text/event-stream\r\n"
            "set-cookie: a=1\r\n"
            "set-cookie: b=2\r\n"
            "Connection: close\r\n\r\n");
}

TEST(HttpResponseHeadTest, FramingAndBrokenFieldsAreLeftOut) {
  const auto r = response_head(Json{{"status", 404},
                                    {"headers",
                                     {{"Content-Length", "5"},
                                      {"transfer-encoding", "chunked"},
                                      {"Connection", "keep-alive"},
                                      {"x-injected", "a\r\nContent-Length: 0"},
                                      {"x-nul", "a\0b"s},
                                      {"bad name", "v"},
                                      {"bad\r\nname", "v"},
                                      {"x-\0nul-name"s, "v"},
                                      {"", "v"},
                                      {"x-ok", "fine"}}}});
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ(*r, "HTTP/1.1 404 Not Found\r\nx-ok: fine\r\nConnection: close\r\n\r\n");
}

TEST(HttpResponseHeadTest, StatusesThatCannotBeRelayed) {
  EXPECT_FALSE(response_head(Json::object()).has_value());
  EXPECT_FALSE(response_head(Json{{"status", "200"}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", 200.5}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", 101}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", 199}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", 600}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", -200}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", UINT64_MAX}}).has_value());
  EXPECT_FALSE(response_head(Json{{"status", 200}, {"headers", "x"}}).has_value());
  EXPECT_TRUE(response_head(Json{{"status", 599}, {"headers", nullptr}}).has_value());
}

// ---- error_response and reason_phrase --------------------------------------------------------

TEST(HttpErrorResponseTest, CompleteResponseWithOpenAiShapedBody) {
  const std::string r = error_response(HttpError{411, "length_required", "send a \"length\""});
  ASSERT_EQ(r.rfind("HTTP/1.1 411 Length Required\r\n", 0), 0u) << r;
  const size_t end = r.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos);
  const std::string head = r.substr(0, end + 4);
  const std::string body = r.substr(end + 4);
  EXPECT_NE(head.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"),
            std::string::npos)
      << head;
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos);
  const Json j = Json::parse(body);
  EXPECT_EQ(j["error"]["code"], "length_required");
  EXPECT_EQ(j["error"]["message"], "send a \"length\"");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  const std::string r503 = error_response(HttpError{503, "x", "y"});
  EXPECT_EQ(Json::parse(r503.substr(r503.find("\r\n\r\n") + 4))["error"]["type"], "server_error");
}

TEST(HttpReasonPhraseTest, KnownAndClassNames) {
  EXPECT_EQ(reason_phrase(200), "OK");
  EXPECT_EQ(reason_phrase(413), "Content Too Large");
  EXPECT_EQ(reason_phrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(reason_phrase(299), "Success");
  EXPECT_EQ(reason_phrase(399), "Redirection");
  EXPECT_EQ(reason_phrase(499), "Client Error");
  EXPECT_EQ(reason_phrase(599), "Server Error");
}

}  // namespace
}  // namespace b3os::agent
