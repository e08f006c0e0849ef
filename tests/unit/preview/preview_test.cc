// The preview's own decisions, apart from any listener: which requests with a token in their
// URL are sent on to the URL without it (a browser's navigation), and how the requests in
// flight are shared among sandboxes (docs/ports.md).
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

Config caps(int max_requests, int per_sandbox, int floor) {
  Config c;
  c.max_requests = max_requests;
  c.max_per_sandbox = per_sandbox;
  c.sandbox_floor = floor;
  return c;
}

TEST(PreviewAdmission, Limits) {
  // The defaults: 896 of 1,024 threads may go in to sandboxes; 512 kept for 64 floors of 8.
  auto l = Admission::limits(Config{});
  EXPECT_EQ(l.node, 896u);
  EXPECT_EQ(l.per_tenant, 256u);
  EXPECT_EQ(l.floor, 8u);
  EXPECT_EQ(l.reserve, 512u);
  // tests/e2e/ports.sh's small caps.
  l = Admission::limits(caps(64, 16, 2));
  EXPECT_EQ(l.node, 56u);
  EXPECT_EQ(l.reserve, 40u);  // min(64 x 2, 56 - 16): a sandbox alone still reaches 16
  // Nonsense is bounded, not trusted (main.cc refuses it before).
  l = Admission::limits(caps(0, 0, 0));
  EXPECT_EQ(l.node, 1u);
  EXPECT_EQ(l.per_tenant, 1u);
  EXPECT_EQ(l.floor, 1u);
  l = Admission::limits(caps(8, 100, 100));
  EXPECT_EQ(l.node, 7u);
  EXPECT_EQ(l.per_tenant, 7u);
  EXPECT_EQ(l.floor, 7u);
}

// Takes slots for `id` until refused; returns how many it got and the refusal's message.
std::pair<int, std::string> fill(Admission& a, const std::string& id, int at_most = 100000) {
  int n = 0;
  while (n < at_most) {
    if (auto why = a.take(id)) return {n, *why};
    ++n;
  }
  return {n, ""};
}

TEST(PreviewAdmission, FourBusySandboxesNoLongerFillTheNode) {
  // Issue 20, point 5: with a cap per sandbox alone, 4 x 256 requests held every one of the
  // 1,024 threads. Now those four share 384 past their floors, and 64 quiet sandboxes each
  // still get their 8.
  Admission a(Config{});
  int busy = 0;
  for (int i = 0; i < 4; ++i) {
    auto [n, why] = fill(a, "sbx_busy" + std::to_string(i));
    EXPECT_GE(n, 8);
    EXPECT_LE(n, 256);
    EXPECT_NE(why, "");
    busy += n;
  }
  EXPECT_EQ(busy, 4 * 8 + 384);
  for (int q = 0; q < 60; ++q) {
    auto [n, why] = fill(a, "sbx_quiet" + std::to_string(q));
    EXPECT_EQ(n, 8) << q;
    // Past its floor, the shared part is taken; the last one fills the node (416 + 480 = 896).
    EXPECT_NE(why.find(q < 59 ? "past its floor of 8" : "all 896 preview requests"), std::string::npos) << why;
  }
  // The node's share is full: a new sandbox is refused, and told why.
  auto [n, why] = fill(a, "sbx_late");
  EXPECT_EQ(n, 0);
  EXPECT_NE(why.find("all 896 preview requests"), std::string::npos) << why;
  // A slot given back is a slot for the next.
  a.give("sbx_quiet0");
  EXPECT_EQ(a.take("sbx_late"), std::nullopt);
  EXPECT_EQ(a.held("sbx_late"), 1u);
}

TEST(PreviewAdmission, ASandboxAloneReachesItsCap) {
  Admission a(Config{});
  auto [n, why] = fill(a, "sbx_a");
  EXPECT_EQ(n, 256);
  EXPECT_NE(why.find("has 256 preview requests in flight, its cap"), std::string::npos) << why;
  // The small caps of tests/e2e/ports.sh: five sandboxes hold 5 x 2 + 16, a sixth its floor.
  Admission small(caps(64, 16, 2));
  int held = 0;
  for (int i = 0; i < 5; ++i) held += fill(small, "sbx_h" + std::to_string(i), 16).first;
  EXPECT_EQ(held, 26);
  EXPECT_EQ(fill(small, "sbx_quiet").first, 2);
  Admission alone(caps(64, 16, 2));
  EXPECT_EQ(fill(alone, "sbx_alone").first, 16);
}

TEST(PreviewAdmission, GiveOfNothingIsHarmless) {
  Admission a(caps(16, 4, 1));
  a.give("sbx_none");
  EXPECT_EQ(a.held("sbx_none"), 0u);
  EXPECT_EQ(fill(a, "sbx_x").first, 4);
}

}  // namespace
}  // namespace b3os::preview

// A request that only the preview cookie lets in: a page on another preview host (same-site,
// since every preview host shares the parent domain) must not use it; the page's own host, a
// typed URL and non-browser clients may.
namespace b3os::preview {
namespace {
constexpr std::string_view kHost = "8000-abc.preview.test";

TEST(PreviewCookieOnly, SameOriginAndTypedNavigationsMayUseIt) {
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "same-origin", "", kHost}));
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "none", "", kHost}));
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "", "", kHost}));  // curl, an older browser
  EXPECT_FALSE(cross_site_with_cookie({"POST", "", "same-origin", "https://8000-abc.preview.test", kHost}));
  EXPECT_FALSE(cross_site_with_cookie({"GET", "websocket", "", "http://8000-ABC.preview.test", kHost}));
  EXPECT_FALSE(cross_site_with_cookie({"POST", "", "", "", kHost}));  // no Origin: no browser's cross-origin POST
}

TEST(PreviewCookieOnly, AnotherSitesRequestsMayNot) {
  EXPECT_TRUE(cross_site_with_cookie({"GET", "", "same-site", "", kHost}));
  EXPECT_TRUE(cross_site_with_cookie({"GET", "", "cross-site", "", kHost}));
  // Without Sec-Fetch-Site (http origins other than localhost): the Origin decides for an
  // upgrade or an unsafe method.
  EXPECT_TRUE(cross_site_with_cookie({"POST", "", "", "https://9000-evil.preview.test", kHost}));
  EXPECT_TRUE(cross_site_with_cookie({"DELETE", "", "", "null", kHost}));
  EXPECT_TRUE(cross_site_with_cookie({"GET", "websocket", "", "https://8000-evil.preview.test", kHost}));
  // A host that merely begins like this one is another host.
  EXPECT_TRUE(cross_site_with_cookie({"POST", "", "", "https://8000-abc.preview.test.evil", kHost}));
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "", "https://9000-evil.preview.test", kHost}));  // a safe read
}

TEST(PreviewCookieOnly, ALinkFollowedFromAnywhereAndAnotherPortOfTheSandboxMay) {
  // A link clicked in a chat, and the 303 that drops a URL's token, arrive cross-site as
  // top-level navigations.
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "cross-site", "", kHost, "navigate", "document"}));
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "same-site", "", kHost, "navigate", ""}));
  // Not a navigation: a frame, a fetch, a POST form, an upgrade.
  EXPECT_TRUE(cross_site_with_cookie({"GET", "", "cross-site", "", kHost, "navigate", "iframe"}));
  EXPECT_TRUE(cross_site_with_cookie({"GET", "", "cross-site", "", kHost, "cors", "empty"}));
  EXPECT_TRUE(cross_site_with_cookie({"POST", "", "cross-site", "https://evil.test", kHost, "navigate", "document"}));
  EXPECT_TRUE(cross_site_with_cookie({"GET", "websocket", "cross-site", "https://evil.test", kHost, "websocket", "websocket"}));
  // Another port of the same sandbox: its page's fetches, POSTs and WebSockets.
  EXPECT_FALSE(cross_site_with_cookie({"GET", "", "same-site", "https://3000-abc.preview.test", kHost, "cors", "empty", true}));
  EXPECT_FALSE(cross_site_with_cookie({"POST", "", "same-site", "https://3000-abc.preview.test", kHost, "cors", "empty", true}));
  EXPECT_FALSE(cross_site_with_cookie({"GET", "websocket", "", "https://3000-abc.preview.test", kHost, "", "", true}));
  // ...but not from another site that merely claims it (cross-site is never the same sandbox).
  EXPECT_TRUE(cross_site_with_cookie({"GET", "", "cross-site", "https://3000-abc.preview.test", kHost, "cors", "empty", true}));
}
}  // namespace
}  // namespace b3os::preview
