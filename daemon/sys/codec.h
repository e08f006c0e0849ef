#pragma once
// Encodings the API speaks: base64 (RFC 4648, OpenSSL's codec), percent-escapes and a UTF-8
// check.

#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace b3os::sys {

/// Whether `bytes` is valid UTF-8 (text is returned as text, other bytes as base64).
bool valid_utf8(std::string_view bytes);
/// How many bytes at the end of `bytes` start a UTF-8 sequence that is not complete yet (0-3):
/// a chunk of a stream cut there is whole once the next chunk's first bytes join it.
size_t utf8_incomplete_tail(std::string_view bytes);
std::string base64_encode(std::string_view bytes);
/// Strict base64 (RFC 4648, padding required, no whitespace); nullopt when malformed.
std::optional<std::string> base64_decode(std::string_view text);
/// Percent-decodes `s` ("+" is a space in queries only). Fails on bad escapes or NUL.
Result<std::string> percent_decode(std::string_view s, bool plus_is_space);

}  // namespace b3os::sys
