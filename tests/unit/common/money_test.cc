#include "common/money.h"

#include <gtest/gtest.h>

namespace b3os {
namespace {

TEST(Money, DollarsBecomeExactMicroDollars) {
  EXPECT_EQ(usd_to_micros(0.1), 100'000);
  EXPECT_EQ(usd_to_micros(0.3), 300'000);
  EXPECT_EQ(usd_to_micros(1), 1'000'000);
  EXPECT_EQ(usd_to_micros(2.5), 2'500'000);
  EXPECT_EQ(usd_to_micros(0.000001), 1);
  EXPECT_EQ(usd_to_micros(0.0000004), 0) << "rounded to the nearest micro-dollar";
  EXPECT_EQ(usd_to_micros(0.0000006), 1);
  EXPECT_EQ(usd_to_micros(1e6), 1'000'000'000'000);
  EXPECT_EQ(usd_to_micros(999999.999999), 999'999'999'999);
  EXPECT_EQ(usd_to_micros(0.1 + 0.2), 300'000) << "a double's noise below a micro-dollar is dropped";
}

TEST(Money, MicroDollarsRoundTripThroughJsonNumbers) {
  EXPECT_EQ(micros_to_usd(100'000), 0.1);
  EXPECT_EQ(micros_to_usd(2'500'000), 2.5);
  // Every amount with six decimals survives micros -> USD -> micros, up to the API's limit.
  for (Micros m = 0; m < 2'000'000; m += 7) ASSERT_EQ(usd_to_micros(micros_to_usd(m)), m) << m;
  for (Micros m = 1'000'000'000'000; m > 999'999'000'000; m -= 997) ASSERT_EQ(usd_to_micros(micros_to_usd(m)), m) << m;
}

TEST(Money, FormatsExactlyWithCentsAtLeast) {
  EXPECT_EQ(format_usd(1'000'000), "$1.00");
  EXPECT_EQ(format_usd(0), "$0.00");
  EXPECT_EQ(format_usd(50'000), "$0.05");
  EXPECT_EQ(format_usd(1'500), "$0.0015");
  EXPECT_EQ(format_usd(123), "$0.000123");
  EXPECT_EQ(format_usd(1'234'567), "$1.234567");
  EXPECT_EQ(format_usd(999'999), "$0.999999") << "never rounded up to look like the cap";
  EXPECT_EQ(format_usd(-1'500), "-$0.0015");
  EXPECT_EQ(usd_decimal(12'340'000), "12.34");
}

}  // namespace
}  // namespace b3os
