// The preview's own decisions, apart from any listener: which requests with a token in their
// URL are sent on to the URL without it (a browser's navigation) (docs/ports.md).
#include "daemon/preview/preview.h"

#include <gtest/gtest.h>

#include <string>

namespace b3os::preview {
namespace {

constexpr std::string_view kHtml = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";

RequestHints nav(std::string_view target = "/?a=1") {
  return RequestHints{"GET", target, "", "navigate", kHtml, ""};
}

TEST(PreviewRedirect, ABrowsersNavigation) {
  EXPECT_TRUE(redirects_to_bare_url(nav()));
  auto head = nav();
  head.method = "HEAD";
  EXPECT_TRUE(redirects_to_bare_url(head));
  auto any_accept = nav();
  any_accept.accept = "";  // Sec-Fetch-Mode says it all
  EXPECT_TRUE(redirects_to_bare_url(any_accept));
  auto spaced = nav();
  spaced.sec_fetch_mode = " Navigate ";
  EXPECT_TRUE(redirects_to_bare_url(spaced));
  // An older browser (no Sec-Fetch-Mode) behind TLS: the proxy in front says so.
  EXPECT_TRUE(redirects_to_bare_url({"GET", "/", "", "", "text/html", "https"}));
  EXPECT_TRUE(redirects_to_bare_url({"GET", "/", "", "", "TEXT/HTML", "HTTPS, http"}));
}

TEST(PreviewRedirect, EveryoneElseIsServed) {
  // Clients without a cookie jar: curl, websocket and SSE clients, fetch.
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/", "", "", "*/*", ""}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/", "", "cors", kHtml, "https"}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/", "", "no-cors", kHtml, ""}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/sse", "", "", "text/event-stream", "https"}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/ws", "websocket", "navigate", kHtml, ""}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/ws", "websocket", "websocket", "", ""}));
  // A page over plain http to a domain other than localhost: no Sec-Fetch-Mode, and no
  // Secure cookie kept; redirected, it would land on a 401.
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/", "", "", kHtml, ""}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/", "", "", kHtml, "http"}));
  EXPECT_FALSE(redirects_to_bare_url({"GET", "/", "", "", kHtml, "http, https"}));  // the first proxy's word
  // Not a GET or HEAD: a form's POST keeps its body.
  for (std::string_view m : {"POST", "PUT", "DELETE", "OPTIONS", "get"}) {
    auto r = nav();
    r.method = m;
    EXPECT_FALSE(redirects_to_bare_url(r)) << m;
  }
}

TEST(PreviewRedirect, NeverToAnotherHost) {
  // A Location of "//host/..." or "/\host/..." is read by browsers as another host.
  for (std::string_view t : {"//evil.example/", "//evil.example/?x=1", "/\\evil.example/", "http://evil.example/", "*", ""})
    EXPECT_FALSE(redirects_to_bare_url(nav(t))) << t;
  EXPECT_TRUE(redirects_to_bare_url(nav("/a//b")));
  EXPECT_TRUE(redirects_to_bare_url(nav("/")));
}

}  // namespace
}  // namespace b3os::preview
