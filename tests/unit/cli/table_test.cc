#include "cli/table.h"

#include <gtest/gtest.h>

namespace b3os::cli {
namespace {

TEST(Table, AlignsColumnsAndLeavesLastUnpadded) {
  Table t({"ID", "STATUS", "NAME"});
  t.add_row({"sbx_1", "running", "x"});
  t.add_row({"sbx_12345", "stopped"});
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.render(),
            "ID         STATUS   NAME\n"
            "sbx_1      running  x\n"
            "sbx_12345  stopped\n");
}

TEST(Table, HeaderOnlyWhenEmpty) {
  Table t({"A", "B"});
  EXPECT_EQ(t.render(), "A  B\n");
}

TEST(Table, ExtraCellsDroppedAndUtf8Width) {
  Table t({"N", "X"});
  t.add_row({"\xC3\xA9t\xC3\xA9", "1", "dropped"});
  t.add_row({"abcd", "2"});
  EXPECT_EQ(t.render(),
            "N     X\n"
            "\xC3\xA9t\xC3\xA9   1\n"
            "abcd  2\n");
}

TEST(DisplayWidth, CountsCodePoints) {
  EXPECT_EQ(display_width(""), 0u);
  EXPECT_EQ(display_width("abc"), 3u);
  EXPECT_EQ(display_width("\xE2\x82\xAC"), 1u);
}

TEST(FormatTime, SecondsMillisStringsAndNull) {
  EXPECT_EQ(format_epoch_ms(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(format_epoch_ms(1714564800123), "2024-05-01T12:00:00Z");
  EXPECT_EQ(format_time(Json(1714564800)), "2024-05-01T12:00:00Z");
  EXPECT_EQ(format_time(Json(1714564800123)), "2024-05-01T12:00:00Z");
  EXPECT_EQ(format_time(Json("2024-05-01T12:00:00.5Z")), "2024-05-01T12:00:00.5Z");
  EXPECT_EQ(format_time(Json()), "-");
}

TEST(FormatCell, Kinds) {
  EXPECT_EQ(format_cell(Json()), "-");
  EXPECT_EQ(format_cell(Json("s")), "s");
  EXPECT_EQ(format_cell(Json(3)), "3");
  EXPECT_EQ(format_cell(Json(true)), "true");
  EXPECT_EQ(format_cell(Json::array()), "-");
  EXPECT_EQ(format_cell(Json::object()), "-");
  EXPECT_EQ(format_cell(Json({"A", "B"})), "A,B");
  EXPECT_EQ(format_cell(Json::parse(R"([{"port":80}])")), R"([{"port":80}])");
}

TEST(FormatMode, OctalForIntegers) {
  EXPECT_EQ(format_mode(Json(420)), "0644");
  EXPECT_EQ(format_mode(Json(493)), "0755");
  EXPECT_EQ(format_mode(Json(0)), "0000");
  EXPECT_EQ(format_mode(Json("rw-r--r--")), "rw-r--r--");
  EXPECT_EQ(format_mode(Json()), "-");
}

TEST(FlattenObject, NestedKeysTimesAndSkip) {
  auto doc = Json::parse(R"({
    "id": "sbx_1", "object": "sandbox", "template": {"id": "tpl_base", "name": "base"},
    "created_at": 1714564800000, "stopped_at": null, "env": {}, "secret_names": ["A", "B"],
    "timing": {"total_ms": 1.5}
  })");
  auto pairs = flatten_object(doc, {"object", "timing"});
  std::vector<std::pair<std::string, std::string>> want = {
      {"id", "sbx_1"},
      {"template.id", "tpl_base"},
      {"template.name", "base"},
      {"created_at", "2024-05-01T12:00:00Z"},
      {"stopped_at", "-"},
      {"env", "-"},
      {"secret_names", "A,B"},
  };
  EXPECT_EQ(pairs, want);
}

TEST(FlattenObject, NonObject) {
  auto pairs = flatten_object(Json(5));
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].second, "5");
}

TEST(RenderKeyValues, AlignsValues) {
  EXPECT_EQ(render_key_values({{"id", "sbx_1"}, {"status", "running"}}),
            "id:     sbx_1\n"
            "status: running\n");
  EXPECT_EQ(render_key_values({}), "");
}

}  // namespace
}  // namespace b3os::cli
