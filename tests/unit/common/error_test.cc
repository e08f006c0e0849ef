#include "common/error.h"

#include <gtest/gtest.h>

#include <set>

#include "common/ids.h"

namespace b3os {
namespace {

TEST(ErrorTable, EveryCodeHasAUniqueNameAStatusAndAnOpenAiType) {
  const std::set<std::string_view> openai_types = {"invalid_request_error", "authentication_error", "permission_error",
                                                   "insufficient_quota", "rate_limit_error", "server_error"};
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(kLastErrorCode); ++c) {
    auto code = static_cast<ErrorCode>(c);
    auto name = error_code_name(code);
    EXPECT_TRUE(names.insert(name).second) << name;
    const int status = error_http_status(code);
    EXPECT_GE(status, 400);
    EXPECT_LE(status, 599);
    EXPECT_EQ(error_code_from_name(name), code);
    EXPECT_TRUE(openai_types.count(error_openai_type(code))) << name << ": " << error_openai_type(code);
    if (status >= 500) {
      EXPECT_EQ(error_openai_type(code), "server_error") << name;
    }
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kLastErrorCode) + 1);
}

TEST(ErrorTable, GatewayCodesKeepWhatOpenAiClientsSaw) {
  EXPECT_EQ(error_http_status(ErrorCode::kPaymentRequired), 402);
  EXPECT_EQ(error_code_name(ErrorCode::kPaymentRequired), "spend_cap_reached");
  EXPECT_EQ(error_openai_type(ErrorCode::kPaymentRequired), "insufficient_quota");
  EXPECT_EQ(error_openai_type(ErrorCode::kForbidden), "permission_error");
  EXPECT_EQ(error_openai_type(ErrorCode::kInvalidRequest), "invalid_request_error");
  EXPECT_EQ(error_http_status(ErrorCode::kModelNotFound), 404);
  EXPECT_EQ(error_code_name(ErrorCode::kModelNotFound), "model_not_found");
  EXPECT_EQ(error_openai_type(ErrorCode::kModelNotFound), "invalid_request_error");
  EXPECT_EQ(error_http_status(ErrorCode::kUpstreamUnavailable), 502);
  EXPECT_EQ(error_code_name(ErrorCode::kUpstreamUnavailable), "upstream_unavailable");
  EXPECT_EQ(error_http_status(ErrorCode::kUpstreamError), 502);
  EXPECT_EQ(error_code_name(ErrorCode::kUpstreamError), "upstream_error");
  EXPECT_EQ(error_http_status(ErrorCode::kUpstreamTimeout), 504);
  EXPECT_EQ(error_code_name(ErrorCode::kUpstreamTimeout), "upstream_timeout");
  EXPECT_EQ(error_http_status(ErrorCode::kProductUnavailable), 503);
  EXPECT_EQ(error_openai_type(ErrorCode::kProductUnavailable), "server_error");
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
