#pragma once
// Money inside b3os is integer micro-dollars (1 USD = 1,000,000): caps, reservations, spend
// and the ledger add and compare exactly. USD numbers exist only at the edges (JSON fields such
// as spend_cap_usd and spent_usd, CLI arguments), converted by the two functions below.

#include <cmath>
#include <cstdint>
#include <string>

namespace b3os {

/// An amount of money in micro-dollars.
using Micros = int64_t;
inline constexpr Micros kMicrosPerUsd = 1'000'000;

/// USD as a client wrote it (a JSON number, a CLI argument) to micro-dollars, rounded to the
/// nearest micro-dollar (halves away from zero). Exact for every amount with at most six
/// decimals up to far past the API's limits: 0.1 is 100000, 2.5 is 2500000. `usd` must be
/// finite and within +-9e12 (callers validate their ranges first).
inline Micros usd_to_micros(double usd) { return static_cast<Micros>(std::llround(usd * 1e6)); }

/// Micro-dollars to a USD number for JSON: the double nearest the exact decimal, so that
/// usd_to_micros(micros_to_usd(m)) == m and 100000 prints as 0.1.
inline double micros_to_usd(Micros m) { return static_cast<double>(m) / 1e6; }

/// Micro-dollars as a decimal USD amount with no sign for currency, exact: at least two
/// decimals, more only where the amount has them. 1000000 -> "1.00", 1500 -> "0.0015",
/// 1234567 -> "1.234567".
inline std::string usd_decimal(Micros m) {
  std::string sign = m < 0 ? "-" : "";
  // The magnitude without overflow at INT64_MIN.
  const uint64_t a = m < 0 ? 0 - static_cast<uint64_t>(m) : static_cast<uint64_t>(m);
  std::string frac = std::to_string(a % kMicrosPerUsd);
  frac.insert(0, 6 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return sign + std::to_string(a / kMicrosPerUsd) + "." + frac;
}

/// Micro-dollars for messages: "$1.00", "$0.0015", "$0.000123".
inline std::string format_usd(Micros m) {
  return m < 0 ? "-$" + usd_decimal(m).substr(1) : "$" + usd_decimal(m);
}

}  // namespace b3os
