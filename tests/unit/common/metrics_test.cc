#include "common/metrics.h"

#include <gtest/gtest.h>

#include "common/request_id.h"

namespace b3os::metrics {
namespace {

bool has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(Metrics, CountersGaugesAndCollectorsRenderInTheTextFormat) {
  Registry r;
  auto& c = r.counter("t_calls_total", "calls, by model", {"model"});
  c.with({"m1"}).inc();
  c.with({"m1"}).inc(2);
  c.with({"we\"ird\\\n"}).inc();
  r.gauge("t_up", "up").with().set(1.5);
  r.gauge("t_help", "a \\ and a\nnewline").with().set(0.1);
  r.collect({"t_sandboxes", "live", {"state"}, [](auto& out) { out.push_back({Labels{"running"}, 3}); }});
  const std::string t = r.render();
  EXPECT_TRUE(has(t, "# HELP t_calls_total calls, by model")) << t;
  EXPECT_TRUE(has(t, "# TYPE t_calls_total counter")) << t;
  EXPECT_TRUE(has(t, R"(t_calls_total{model="m1"} 3)")) << t;
  EXPECT_TRUE(has(t, R"(t_calls_total{model="we\"ird\\\n"} 1)")) << t;
  EXPECT_TRUE(has(t, "# TYPE t_up gauge")) << t;
  EXPECT_TRUE(has(t, "t_up 1.5")) << t;
  EXPECT_TRUE(has(t, "# HELP t_help a \\\\ and a\\nnewline")) << t;
  EXPECT_TRUE(has(t, "t_help 0.1")) << t;  // the shortest text that reads back the same
  EXPECT_TRUE(has(t, R"(t_sandboxes{state="running"} 3)")) << t;
  // Families come out sorted by name, each HELP before its TYPE before its samples.
  EXPECT_LT(t.find("t_calls_total"), t.find("t_sandboxes"));
  EXPECT_LT(t.find("t_sandboxes"), t.find("t_up"));
}

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Registry r;
  auto& h = r.histogram("t_seconds", "latency", {"op"}, {0.1, 1});
  h.with({"fork"}).observe(0.05);
  h.with({"fork"}).observe(0.1);  // a bound is inclusive (le)
  h.with({"fork"}).observe(0.5);
  h.with({"fork"}).observe(7);
  const std::string t = r.render();
  EXPECT_TRUE(has(t, "# TYPE t_seconds histogram")) << t;
  EXPECT_TRUE(has(t, R"(t_seconds_bucket{op="fork",le="0.1"} 2)")) << t;
  EXPECT_TRUE(has(t, R"(t_seconds_bucket{op="fork",le="1"} 3)")) << t;
  EXPECT_TRUE(has(t, R"(t_seconds_bucket{op="fork",le="+Inf"} 4)")) << t;
  EXPECT_TRUE(has(t, R"(t_seconds_sum{op="fork"} 7.65)")) << t;
  EXPECT_TRUE(has(t, R"(t_seconds_count{op="fork"} 4)")) << t;
}

TEST(Metrics, AFamilyStopsGrowingAtItsSeriesCap) {
  Registry r;
  auto& c = r.counter("t_capped_total", "capped", {"v"});
  for (size_t i = 0; i < Family<Counter>::kMaxSeries + 500; ++i) c.with({std::to_string(i)}).inc();
  size_t series = 0;
  c.each([&](const Labels&, const Counter&) { ++series; });
  EXPECT_EQ(series, Family<Counter>::kMaxSeries + 1);  // the cap, plus the one "other"
  EXPECT_TRUE(has(r.render(), R"(t_capped_total{v="other"} 500)"));
}

TEST(RequestId, PlainClientIdsAreKeptOthersReplaced) {
  EXPECT_EQ(request_id_for("abc-1.2:3_x"), "abc-1.2:3_x");
  for (std::string bad : {std::string(""), std::string(129, 'a'), std::string("a b"), std::string("a\"b"),
                          std::string("a\nb"), std::string("\xc3\xa9")}) {
    const std::string id = request_id_for(bad);
    EXPECT_EQ(id.rfind("req_", 0), 0u) << bad;
    EXPECT_EQ(id.size(), 24u);
  }
  EXPECT_NE(request_id_for(""), request_id_for(""));
  EXPECT_EQ(current_request_id(), "");
  {
    RequestIdScope s("req_x");
    EXPECT_EQ(current_request_id(), "req_x");
  }
  EXPECT_EQ(current_request_id(), "");
}

}  // namespace
}  // namespace b3os::metrics
