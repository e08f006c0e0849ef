#pragma once
// Output for people: aligned tables, "key: value" listings and readable JSON cells.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/args.h"

namespace b3os::cli {

/// A table with a header row; columns are padded to the widest cell, two spaces apart.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  /// Adds a row; missing cells are blank, extra cells are dropped.
  void add_row(std::vector<std::string> cells);
  /// Number of data rows (without the header).
  size_t size() const { return rows_.size(); }
  /// Renders every row with a trailing newline; the last column is not padded.
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

/// Terminal width of a UTF-8 string, counted as code points (good enough for tables).
size_t display_width(std::string_view s);

/// Formats epoch milliseconds as "2024-05-01T12:00:00Z" (UTC, seconds precision).
std::string format_epoch_ms(int64_t ms);

/// A timestamp from the API as text: strings are shown as they are, numbers are taken as epoch
/// seconds or milliseconds (by magnitude), null is "-".
std::string format_time(const Json& v);

/// A JSON value as one table cell: strings bare, null "-", scalars as JSON, arrays of scalars
/// joined with ",", anything else as compact JSON.
std::string format_cell(const Json& v);

/// A file mode: integers as octal ("0644"), strings as they are.
std::string format_mode(const Json& v);

/// Flattens an object into ("a.b", "text") pairs, depth first, in the object's order; empty
/// objects become one pair with "-". Keys in `skip` (top level only) are left out.
std::vector<std::pair<std::string, std::string>> flatten_object(
    const Json& obj, const std::vector<std::string>& skip = {});

/// Renders pairs as "key: value" lines with the values aligned.
std::string render_key_values(const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace b3os::cli
