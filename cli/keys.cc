// `b3os keys ...` and `b3os projects ...`: API keys, their spend caps, the model-spend ledger
// and project settings, straight from the local store (no API; run on the daemon's host).

#include <sys/stat.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/money.h"
#include "daemon/store/store.h"

namespace b3os::cli {

namespace {

constexpr const char* kDbFile = "b3os.db";

// Opens the store b3osd uses: `spec` as its --store says (a postgres:// URL), or else the
// SQLite file in `data_dir`, creating the directory (0700) if it does not exist.
Result<std::unique_ptr<store::Store>> open_store(const std::string& data_dir, const std::string& spec) {
  if (!spec.empty()) return store::open_store(spec, data_dir, "cli", 1);
  std::error_code ec;
  if (!std::filesystem::exists(data_dir, ec)) {
    std::filesystem::create_directories(data_dir, ec);
    if (ec) {
      return fail(ErrorCode::kInternal, "create data directory " + data_dir + ": " + ec.message());
    }
    ::chmod(data_dir.c_str(), 0700);
  }
  std::string path = (std::filesystem::path(data_dir) / kDbFile).string();
  auto store = store::Store::open(path);
  if (!store) {
    Error e = store.error();
    return fail(e.wrap("open " + path));
  }
  return store;
}

std::string render_key_table(const std::vector<store::ApiKeyRecord>& keys, bool with_revoked) {
  std::vector<std::string> head = {"ID", "PROJECT", "PREFIX", "CREATED", "LAST USED"};
  if (with_revoked) head.emplace_back("REVOKED");
  Table t(head);
  for (const auto& k : keys) {
    std::vector<std::string> row = {k.id, k.project_name, k.prefix, format_epoch_ms(k.created_at_ms),
                                    k.last_used_at_ms ? format_epoch_ms(k.last_used_at_ms) : "never"};
    if (with_revoked) row.push_back(k.revoked_at_ms ? format_epoch_ms(k.revoked_at_ms) : "-");
    t.add_row(row);
  }
  return t.render();
}

/// Parses "1.5" (USD, kept to the nearest micro-dollar) or "none" (no cap).
Result<std::optional<Micros>> parse_cap(const std::string& v) {
  if (v == "none") return std::optional<Micros>();
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0 && d <= 1e6))
    return fail(ErrorCode::kInvalidRequest, "spend cap: a number of USD from 0 to 1000000, or none (got \"" + v + "\")");
  return std::optional<Micros>(usd_to_micros(d));
}

/// A money amount in JSON: USD, as the API shows money.
Json usd_json(std::optional<Micros> m) { return m ? Json(micros_to_usd(*m)) : Json(nullptr); }

int run_keys_create(const GlobalOptions& g, const std::string& project, const std::string& cap, bool e2b) {
  std::optional<Micros> cap_micros;
  if (!cap.empty()) {
    auto c = parse_cap(cap);
    if (!c) return report_error(c.error());
    cap_micros = *c;
  }
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto key = (*store)->create_api_key(project, e2b);
  if (!key) return report_error(key.error());
  if (cap_micros) {
    if (auto r = (*store)->set_budget_cap(key->record.id, key->record.project_id, cap_micros); !r) return report_error(r.error());
  }
  std::cout << key->key << std::endl;
  std::cerr << "project: " << key->record.project_name << " (" << key->record.project_id
            << "), key id " << key->record.id << "\n";
  return 0;
}

int run_keys_list(const GlobalOptions& g, bool json, bool all) {
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto keys = (*store)->list_api_keys(all);
  if (!keys) return report_error(keys.error());
  if (json) {
    const auto ms = [](int64_t v) { return v ? Json(v) : Json(nullptr); };
    Json out = Json::array();
    for (const auto& k : *keys) {
      out.push_back({{"id", k.id},
                     {"project_id", k.project_id},
                     {"project", k.project_name},
                     {"prefix", k.prefix},
                     {"created_at_ms", k.created_at_ms},
                     {"last_used_at_ms", ms(k.last_used_at_ms)},
                     {"revoked_at_ms", ms(k.revoked_at_ms)}});
    }
    print_json(out);
    return 0;
  }
  std::cout << render_key_table(*keys, all);
  return 0;
}

int run_keys_revoke(const GlobalOptions& g, const std::string& key_id) {
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto r = (*store)->revoke_api_key(key_id, now_unix_ms());
  if (!r) return report_error(r.error());
  if (!*r) return report_error({ErrorCode::kNotFound, "no key " + key_id + " in force (see `b3os keys list --all`)", 0});
  std::cerr << "key " << key_id << " revoked: every request with it is refused from now on\n";
  return 0;
}

int run_keys_set_cap(const GlobalOptions& g, const std::string& key_id, const std::string& cap) {
  auto c = parse_cap(cap);
  if (!c) return report_error(c.error());
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto keys = (*store)->list_api_keys();
  if (!keys) return report_error(keys.error());
  for (const auto& k : *keys) {
    if (k.id != key_id) continue;
    if (auto r = (*store)->set_budget_cap(k.id, k.project_id, *c); !r) return report_error(r.error());
    std::cerr << "key " << k.id << ": model spend cap " << (*c ? usd_decimal(**c) + " USD" : "none") << "\n";
    return 0;
  }
  return report_error({ErrorCode::kNotFound, "no key " + key_id + " (see `b3os keys list`)", 0});
}

/// What a budget (a key's or a sandbox grant's) has spent, and its newest ledger rows.
int run_spend(const GlobalOptions& g, const std::string& budget_id, bool json) {
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto b = (*store)->get_budget(budget_id);
  if (!b) return report_error(b.error());
  if (!*b) return report_error({ErrorCode::kNotFound, "no budget " + budget_id + " (a key id, or a grant id grt_...)", 0});
  auto rows = (*store)->ledger(budget_id, 1000);
  if (!rows) return report_error(rows.error());
  if (json) {
    Json calls = Json::array();
    for (const auto& r : *rows)
      calls.push_back({{"sandbox_id", r.sandbox_id}, {"key_id", r.key_id}, {"model", r.model},
                       {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
                       {"cost_usd", usd_json(r.cost_micros)}, {"reserved_usd", usd_json(r.reserved_micros)},
                       {"cost_micros", r.cost_micros}, {"reserved_micros", r.reserved_micros},
                       {"duration_ms", r.duration_ms}, {"status", r.status}, {"outcome", r.outcome}});
    print_json({{"id", (*b)->id}, {"project_id", (*b)->project_id},
                {"cap_usd", usd_json((*b)->cap_micros)}, {"spent_usd", usd_json((*b)->spent_micros)},
                {"cap_micros", (*b)->cap_micros ? Json(*(*b)->cap_micros) : Json(nullptr)},
                {"spent_micros", (*b)->spent_micros}, {"calls", calls}});
    return 0;
  }
  std::cout << (*b)->id << ": spent " << usd_decimal((*b)->spent_micros) << " USD of "
            << ((*b)->cap_micros ? usd_decimal(*(*b)->cap_micros) + " USD" : std::string("no cap")) << "\n";
  Table t({"SANDBOX", "MODEL", "IN", "OUT", "COST_USD", "MS", "STATUS", "OUTCOME"});
  for (const auto& r : *rows)
    t.add_row({r.sandbox_id.empty() ? "-" : r.sandbox_id, r.model, std::to_string(r.prompt_tokens),
               std::to_string(r.completion_tokens), usd_decimal(r.cost_micros), std::to_string(static_cast<int64_t>(r.duration_ms)),
               std::to_string(r.status), r.outcome});
  std::cout << t.render();
  return 0;
}

int run_projects_set_infer(const GlobalOptions& g, const std::string& project, const std::string& value) {
  if (value != "on" && value != "off")
    return report_error({ErrorCode::kInvalidRequest, "set-infer takes on or off (got \"" + value + "\")", 0});
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  if (auto r = (*store)->set_project_infer(project, value == "on"); !r) return report_error(r.error());
  std::cerr << "project " << project << ": model gateway (infer:run) " << value << "\n";
  return 0;
}

int run_nodes_list(const GlobalOptions& g, bool json) {
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto nodes = (*store)->list_nodes();
  if (!nodes) return report_error(nodes.error());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& n : *nodes)
      out.push_back({{"id", n.id}, {"url", n.url}, {"state", n.state}, {"started_ms", n.started_ms},
                     {"heartbeat_ms", n.heartbeat_ms}, {"sandboxes", n.sandboxes}, {"max_sandboxes", n.max_sandboxes},
                     {"memory_mib", n.memory_mib}, {"used_memory_mib", n.used_memory_mib}, {"vcpu", n.vcpu},
                     {"used_vcpu", n.used_vcpu}, {"warm", n.warm}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  Table t({"NODE", "STATE", "SANDBOXES", "MEMORY MIB", "VCPU", "LAST HEARTBEAT", "URL"});
  for (const auto& n : *nodes)
    t.add_row({n.id, n.state, std::to_string(n.sandboxes) + "/" + std::to_string(n.max_sandboxes),
               std::to_string(n.used_memory_mib) + "/" + std::to_string(n.memory_mib),
               std::to_string(n.used_vcpu) + "/" + std::to_string(n.vcpu), format_epoch_ms(n.heartbeat_ms), n.url});
  std::cout << t.render();
  return 0;
}

int run_nodes_set_state(const GlobalOptions& g, const std::string& node, const std::string& state) {
  auto store = open_store(g.data_dir, g.store);
  if (!store) return report_error(store.error());
  auto changed = (*store)->set_node_state(node, state);
  if (!changed) return report_error(changed.error());
  if (!*changed)
    return report_error({ErrorCode::kNotFound, "no node " + node + " that is up (a down node comes back by starting)", 0});
  std::cerr << "node " << node << ": " << state
            << (state == "draining" ? " (routers place no new sandboxes there; with an object store its forkable sandboxes move to other "
                                         "nodes after its --drain-move-after, the others run on)" : "") << "\n";
  return 0;
}

}  // namespace

void add_key_commands(CLI::App& app, GlobalOptions& g, Action& action) {
  auto* keys = app.add_subcommand("keys", "Manage API keys in the local store (run on the daemon's host)");
  keys->require_subcommand(1);
  keys->add_option("--data-dir", g.data_dir, "Directory of b3os.db")
      ->envname("B3OS_DATA_DIR")
      ->capture_default_str();
  keys->add_option("--store", g.store, "b3osd's --store, when it is not DATA_DIR/b3os.db (a postgres:// URL)")
      ->envname("B3OS_STORE");

  auto project = std::make_shared<std::string>("default");
  auto cap = std::make_shared<std::string>();
  auto* create = keys->add_subcommand("create", "Create a key; prints it alone on stdout");
  create->add_option("--project", *project, "Project name (created if new)")->capture_default_str();
  create->add_option("--spend-cap-usd", *cap, "Cap on the key's model spend (/v1/infer, and grants created with no cap of their own)");
  auto e2b = std::make_shared<bool>(false);
  create->add_flag("--e2b", *e2b, "An e2b_ key, the shape E2B's SDKs expect in E2B_API_KEY (docs/e2b.md); it works on every route");
  create->callback([&g, &action, project, cap, e2b] {
    action = [&g, project, cap, e2b] { return run_keys_create(g, *project, *cap, *e2b); };
  });

  auto key_id = std::make_shared<std::string>();
  auto* set_cap = keys->add_subcommand("set-cap", "Set or remove a key's model spend cap: set-cap KEY_ID USD|none");
  set_cap->add_option("key_id", *key_id, "Key id (key_...)")->required();
  set_cap->add_option("usd", *cap, "Cap in USD, or none")->required();
  set_cap->callback([&g, &action, key_id, cap] {
    action = [&g, key_id, cap] { return run_keys_set_cap(g, *key_id, *cap); };
  });

  auto spend_json = std::make_shared<bool>(false);
  auto* spend = keys->add_subcommand("spend", "Show a budget's spend and ledger: spend KEY_ID|GRANT_ID");
  spend->add_option("budget", *key_id, "A key id (key_...) or a sandbox grant's budget (grt_...)")->required();
  spend->add_flag("--json", *spend_json, "Print as JSON");
  spend->callback([&g, &action, key_id, spend_json] {
    action = [&g, key_id, spend_json] { return run_spend(g, *key_id, *spend_json); };
  });

  auto json = std::make_shared<bool>(false);
  auto all = std::make_shared<bool>(false);
  auto* list = keys->add_subcommand("list", "List keys with their last use (never the keys themselves)");
  list->add_flag("--json", *json, "Print the keys as JSON");
  list->add_flag("--all", *all, "Revoked keys too");
  list->callback([&g, &action, json, all] { action = [&g, json, all] { return run_keys_list(g, *json, *all); }; });

  auto revoke_id = std::make_shared<std::string>();
  auto* revoke = keys->add_subcommand("revoke", "Revoke a key: revoke KEY_ID (its requests are refused at once)");
  revoke->add_option("key_id", *revoke_id, "Key id (key_...)")->required();
  revoke->callback([&g, &action, revoke_id] { action = [&g, revoke_id] { return run_keys_revoke(g, *revoke_id); }; });

  auto* nodes = app.add_subcommand("nodes", "The nodes of a cluster in its shared store (docs/cluster.md)");
  nodes->require_subcommand(1);
  nodes->add_option("--store", g.store, "the cluster's store (a postgres:// URL)")->envname("B3OS_STORE");
  auto nodes_json = std::make_shared<bool>(false);
  auto* nlist = nodes->add_subcommand("list", "Each node's state (ready, draining, down) and load");
  nlist->add_flag("--json", *nodes_json, "Print as JSON");
  nlist->callback([&g, &action, nodes_json] { action = [&g, nodes_json] { return run_nodes_list(g, *nodes_json); }; });
  auto node_name = std::make_shared<std::string>();
  auto* drain = nodes->add_subcommand("drain", "No new sandboxes on NODE (its forkable sandboxes move to other nodes; the others run on until they end)");
  drain->add_option("node", *node_name, "Node id")->required();
  drain->callback([&g, &action, node_name] {
    action = [&g, node_name] { return run_nodes_set_state(g, *node_name, "draining"); };
  });
  auto* ready = nodes->add_subcommand("ready", "Take new sandboxes on NODE again (undoes drain)");
  ready->add_option("node", *node_name, "Node id")->required();
  ready->callback([&g, &action, node_name] {
    action = [&g, node_name] { return run_nodes_set_state(g, *node_name, "ready"); };
  });

  auto* projects = app.add_subcommand("projects", "Project settings in the local store (run on the daemon's host)");
  projects->require_subcommand(1);
  projects->add_option("--data-dir", g.data_dir, "Directory of b3os.db")->envname("B3OS_DATA_DIR")->capture_default_str();
  projects->add_option("--store", g.store, "b3osd's --store, when it is not DATA_DIR/b3os.db (a postgres:// URL)")
      ->envname("B3OS_STORE");
  auto pname = std::make_shared<std::string>();
  auto onoff = std::make_shared<std::string>();
  auto* set_infer = projects->add_subcommand("set-infer", "Allow (on, the default) or forbid (off) the model gateway: set-infer NAME on|off");
  set_infer->add_option("name", *pname, "Project name")->required();
  set_infer->add_option("value", *onoff, "on or off")->required();
  set_infer->callback([&g, &action, pname, onoff] {
    action = [&g, pname, onoff] { return run_projects_set_infer(g, *pname, *onoff); };
  });
}

}  // namespace b3os::cli
