#pragma once
// Small JSON helpers shared by the daemon's modules.

#include <cstddef>
#include <string_view>

namespace b3os {

/// The deepest nesting of arrays and objects in a JSON text (strings skipped). Copying or
/// serializing very deep JSON recurses, so bodies from outside are refused above a depth
/// before they are parsed.
size_t json_depth(std::string_view text);

}  // namespace b3os
