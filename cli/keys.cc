// `b3os keys create` and `b3os keys list`: API keys, straight from the local store (no API).

#include <sys/stat.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "daemon/store/store.h"

namespace b3os::cli {

namespace {

constexpr const char* kDbFile = "b3os.db";

// Opens the store in `data_dir`, creating the directory (0700) if it does not exist.
Result<std::unique_ptr<store::Store>> open_store(const std::string& data_dir) {
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

std::string render_key_table(const std::vector<store::ApiKeyRecord>& keys) {
  Table t({"ID", "PROJECT", "PREFIX", "CREATED"});
  for (const auto& k : keys) {
    t.add_row({k.id, k.project_name, k.prefix, format_epoch_ms(k.created_at_ms)});
  }
  return t.render();
}

int run_keys_create(const GlobalOptions& g, const std::string& project) {
  auto store = open_store(g.data_dir);
  if (!store) return report_error(store.error());
  auto key = (*store)->create_api_key(project);
  if (!key) return report_error(key.error());
  std::cout << key->key << std::endl;
  std::cerr << "project: " << key->record.project_name << " (" << key->record.project_id
            << "), key id " << key->record.id << "\n";
  return 0;
}

int run_keys_list(const GlobalOptions& g, bool json) {
  auto store = open_store(g.data_dir);
  if (!store) return report_error(store.error());
  auto keys = (*store)->list_api_keys();
  if (!keys) return report_error(keys.error());
  if (json) {
    Json out = Json::array();
    for (const auto& k : *keys) {
      out.push_back({{"id", k.id},
                     {"project_id", k.project_id},
                     {"project", k.project_name},
                     {"prefix", k.prefix},
                     {"created_at_ms", k.created_at_ms}});
    }
    print_json(out);
    return 0;
  }
  std::cout << render_key_table(*keys);
  return 0;
}

}  // namespace

void add_key_commands(CLI::App& app, GlobalOptions& g, Action& action) {
  auto* keys = app.add_subcommand("keys", "Manage API keys in the local store (run on the daemon's host)");
  keys->require_subcommand(1);
  keys->add_option("--data-dir", g.data_dir, "Directory of b3os.db")
      ->envname("B3OS_DATA_DIR")
      ->capture_default_str();

  auto project = std::make_shared<std::string>("default");
  auto* create = keys->add_subcommand("create", "Create a key; prints it alone on stdout");
  create->add_option("--project", *project, "Project name (created if new)")->capture_default_str();
  create->callback([&g, &action, project] {
    action = [&g, project] { return run_keys_create(g, *project); };
  });

  auto json = std::make_shared<bool>(false);
  auto* list = keys->add_subcommand("list", "List keys (never the keys themselves)");
  list->add_flag("--json", *json, "Print the keys as JSON");
  list->callback([&g, &action, json] { action = [&g, json] { return run_keys_list(g, *json); }; });
}

}  // namespace b3os::cli
