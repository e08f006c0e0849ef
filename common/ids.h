#pragma once
// Identifiers (`sbx_01m5t68q1b590rj801nbzsqzkk`: a prefix and a ULID in lowercase Crockford
// base32, so ids sort by creation time) and random tokens.

#include <cstdint>
#include <string>
#include <string_view>

namespace b3os {

/// A new id: `prefix` + "_" + 26 characters (48-bit milliseconds, 80 random bits).
std::string new_id(std::string_view prefix);
/// Like new_id but with a given time, for tests.
std::string new_id_at(std::string_view prefix, uint64_t unix_ms);
/// `n` random bytes from the kernel (getrandom).
std::string random_bytes(size_t n);
/// `n` random characters of lowercase Crockford base32.
std::string random_base32(size_t n);
/// Lowercase hex of `data`.
std::string to_hex(std::string_view data);
/// True if `s` looks like an id of this prefix (prefix, "_", 26 base32 chars).
bool valid_id(std::string_view s, std::string_view prefix);

}  // namespace b3os
