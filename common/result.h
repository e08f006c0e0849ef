#pragma once
// Result<T>: a value or an Error. tl::expected stands in for std::expected (not in g++ 12).

#include <tl/expected.hpp>

#include "common/error.h"

namespace b3os {

template <typename T>
using Result = tl::expected<T, Error>;

/// Makes the error side of a Result: `return fail(ErrorCode::kInvalidRequest, "...")`.
inline tl::unexpected<Error> fail(ErrorCode code, std::string message, int err_no = 0) {
  return tl::unexpected<Error>(Error{code, std::move(message), err_no});
}
inline tl::unexpected<Error> fail(Error e) { return tl::unexpected<Error>(std::move(e)); }

}  // namespace b3os
