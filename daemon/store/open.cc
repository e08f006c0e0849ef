#include <string>

#include "daemon/store/pg_store.h"
#include "daemon/store/store.h"

namespace b3os::store {

Result<std::unique_ptr<Store>> open_store(const std::string& spec, const std::string& data_dir,
                                          const std::string& node, int pool_size) {
  if (spec.empty()) return Store::open(data_dir + "/b3os.db");
  if (spec.rfind("sqlite:", 0) == 0) return Store::open(spec.substr(7));
  if (spec.rfind("postgres://", 0) == 0 || spec.rfind("postgresql://", 0) == 0)
    return PgStore::open(spec, pool_size, node);
  return fail(ErrorCode::kInvalidRequest,
              "store: \"" + spec + "\" is neither sqlite:PATH nor a postgres:// or postgresql:// URL");
}

}  // namespace b3os::store
