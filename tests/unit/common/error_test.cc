#include "common/error.h"

#include <gtest/gtest.h>

#include <set>

#include "common/ids.h"

namespace b3os {
namespace {

TEST(ErrorTable, EveryCodeHasAUniqueNameAndAStatus) {
  std::set<std::string_view> names;
  for (int c = static_cast<int>(ErrorCode::kInvalidRequest); c <= static_cast<int>(ErrorCode::kCapacityUnavailable); ++c) {
    auto code = static_cast<ErrorCode>(c);
    auto name = error_code_name(code);
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_GE(error_http_status(code), 400);
    EXPECT_EQ(error_code_from_name(name), code);
  }
}

TEST(ErrorTable, SpecStatuses) {
  EXPECT_EQ(error_http_status(ErrorCode::kInvalidRequest), 400);
  EXPECT_EQ(error_http_status(ErrorCode::kUnauthorized), 401);
  EXPECT_EQ(error_http_status(ErrorCode::kSandboxNotFound), 404);
  EXPECT_EQ(error_http_status(ErrorCode::kForkUnavailable), 409);
  EXPECT_EQ(error_http_status(ErrorCode::kIdempotencyKeyConflict), 409);
  EXPECT_EQ(error_http_status(ErrorCode::kPayloadTooLarge), 413);
  EXPECT_EQ(error_http_status(ErrorCode::kUnsupportedMediaType), 415);
  EXPECT_EQ(error_http_status(ErrorCode::kConcurrencyLimited), 429);
  EXPECT_EQ(error_http_status(ErrorCode::kInternal), 500);
  EXPECT_EQ(error_http_status(ErrorCode::kNotImplemented), 501);
  EXPECT_EQ(error_http_status(ErrorCode::kCapacityUnavailable), 503);
  EXPECT_EQ(error_code_name(ErrorCode::kSandboxNotFound), "sandbox_not_found");
}

TEST(ErrorTable, UnknownNameIsInternal) { EXPECT_EQ(error_code_from_name("nope"), ErrorCode::kInternal); }

TEST(Error, WrapAddsContext) {
  Error e = errno_error(ErrorCode::kInternal, "open /x", ENOENT);
  e.wrap("starting");
  EXPECT_EQ(e.message, "starting: open /x: No such file or directory");
  EXPECT_EQ(e.err_no, ENOENT);
}

TEST(Ids, ShapeAndOrder) {
  std::string a = new_id_at("sbx", 1000), b = new_id_at("sbx", 2000);
  EXPECT_EQ(a.size(), 30u);
  EXPECT_TRUE(valid_id(a, "sbx"));
  EXPECT_LT(a, b);
  EXPECT_FALSE(valid_id(a, "key"));
  EXPECT_FALSE(valid_id("sbx_short", "sbx"));
  EXPECT_FALSE(valid_id("sbx_01m5t68q1b590rj801nbzsqzkI", "sbx"));  // upper case is not ours
  EXPECT_TRUE(valid_id("sbx_01m5t68q1b590rj801nbzsqzkk", "sbx"));   // the spec's example
  EXPECT_NE(new_id("sbx"), new_id("sbx"));
}

}  // namespace
}  // namespace b3os
