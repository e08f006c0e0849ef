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

namespace b3os::store {

// A single node's store keeps no cluster: these say so plainly to whoever calls them.
namespace {
Error not_shared(std::string_view what) {
  return Error{ErrorCode::kNotImplemented,
               std::string(what) + " needs a shared store (b3osd --store postgres://...; docs/cluster.md)", 0};
}
}  // namespace

Result<BudgetHold> Store::reserve_budget(const std::string&, const std::string&, Micros) {
  return fail(not_shared("holding budget in the store"));
}
Result<void> Store::settle_budget(const std::string&, const LedgerRow&) {
  return fail(not_shared("settling budget in the store"));
}
Result<void> Store::register_node(const NodeRecord&) { return fail(not_shared("registering a node")); }
Result<std::string> Store::heartbeat(const NodeRecord&) { return fail(not_shared("a node's heartbeat")); }
Result<std::vector<std::string>> Store::mark_silent_nodes_down(int64_t) { return fail(not_shared("marking nodes down")); }
Result<std::vector<NodeRecord>> Store::list_nodes() { return fail(not_shared("listing nodes")); }
Result<bool> Store::set_node_state(const std::string&, const std::string&) {
  return fail(not_shared("setting a node's state"));
}
Result<std::string> Store::sandbox_node(const std::string&) { return fail(not_shared("finding a sandbox's node")); }

}  // namespace b3os::store
