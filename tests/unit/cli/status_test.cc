#include <gtest/gtest.h>

#include "cli/commands.h"

namespace b3os::cli {
namespace {

TEST(Status, ParsesThePrometheusTextFormat) {
  auto s = parse_metrics_text(
      "# HELP x y\n# TYPE x counter\nx 3\nb3os_sandboxes{state=\"running\",template=\"a\\\"b\"} 2\n"
      "h_bucket{le=\"+Inf\"} 7\nbroken{\nlast{k=\"v\"} 1.5e3");
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].name, "x");
  EXPECT_EQ(s[0].value, 3);
  EXPECT_EQ(s[1].labels.at("state"), "running");
  EXPECT_EQ(s[1].labels.at("template"), "a\"b");
  EXPECT_EQ(s[2].labels.at("le"), "+Inf");
  EXPECT_EQ(s[3].value, 1500);
}

TEST(Status, RendersHealthCapacityPoolsAndTemplates) {
  auto m = parse_metrics_text(
      "b3os_build_info{version=\"0.1.0\"} 1\nb3os_start_time_seconds 1000\n"
      "b3os_node_capacity{kind=\"max\"} 10\nb3os_node_capacity{kind=\"live\"} 4\n"
      "b3os_node_capacity{kind=\"starting\"} 1\nb3os_node_capacity{kind=\"pooled\"} 3\n"
      "b3os_sandboxes{state=\"running\",template=\"base\"} 3\nb3os_sandboxes{state=\"paused\",template=\"base\"} 1\n"
      "b3os_pool_size{pool=\"warm\"} 2\nb3os_pool_target{pool=\"warm\"} 2\nb3os_pool_target{pool=\"fork\"} 0\n"
      "b3os_pool_claims_total{pool=\"warm\",outcome=\"hit\"} 5\n"
      "b3os_template_checkpoint{template=\"base\",status=\"ready\",creates=\"restore\"} 1\n"
      "b3os_gateway_models{model=\"m\"} 1\nb3os_gateway_calls_total{model=\"m\",outcome=\"ok\"} 4\n"
      "b3os_gateway_spend_micros_total{model=\"m\"} 1234\n"
      "b3os_sandbox_failures_total{kind=\"out_of_memory\"} 2\n"
      "b3os_node_committed{resource=\"memory_mib\"} 2048\nb3os_node_admits{resource=\"memory_mib\"} 8192\n"
      "b3os_node_committed{resource=\"vcpu\"} 4\nb3os_node_admits{resource=\"vcpu\"} 0\n"
      "b3os_node_committed{resource=\"disk_gib\"} 4\nb3os_node_admits{resource=\"disk_gib\"} 100\n");
  const std::string out = render_status("http://n:7070", "ready", m, 1000 + 3725);
  EXPECT_NE(out.find("b3osd 0.1.0 at http://n:7070: ready (up 1h 2m)"), std::string::npos) << out;
  EXPECT_NE(out.find("8 of 10 sandboxes (80%)"), std::string::npos) << out;
  EXPECT_NE(out.find("running 3 (base 3)"), std::string::npos) << out;
  EXPECT_NE(out.find("paused 1 (base 1)"), std::string::npos) << out;
  EXPECT_NE(out.find("warm 2/2 (5 hits, 0 misses)"), std::string::npos) << out;
  EXPECT_NE(out.find("fork off"), std::string::npos) << out;
  EXPECT_NE(out.find("base (checkpoint ready, creates restore)"), std::string::npos) << out;
  EXPECT_NE(out.find("m; 4 calls, 0 refused at a cap, $0.001234 charged"), std::string::npos) << out;
  EXPECT_NE(out.find("sandboxes 2 (out_of_memory 2)"), std::string::npos) << out;
  EXPECT_NE(out.find("committed: 2048 of 8192 MiB memory (25%), 4 vCPUs, 4 of 100 GiB disk (4%)"), std::string::npos) << out;
}

}  // namespace
}  // namespace b3os::cli
