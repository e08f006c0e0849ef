#include "daemon/gateway/settles.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/metrics.h"
#include "common/money.h"

namespace b3os::gateway {

namespace {

metrics::Gauge& pending_gauge() {
  static metrics::Gauge& g = metrics::metrics()
                                 .gauge("b3os_gateway_settles_pending",
                                        "Model calls whose settle (ledger row, charge, hold release) waits for the "
                                        "shared store to answer")
                                 .with();
  return g;
}

nlohmann::json to_json(const std::string& hold_id, const store::LedgerRow& r) {
  return {{"hold_id", hold_id},         {"budget_id", r.budget_id},
          {"project_id", r.project_id}, {"sandbox_id", r.sandbox_id},
          {"key_id", r.key_id},         {"model", r.model},
          {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
          {"cost_micros", r.cost_micros},     {"reserved_micros", r.reserved_micros},
          {"duration_ms", r.duration_ms},     {"status", r.status},
          {"outcome", r.outcome}};
}

bool from_json(const nlohmann::json& j, std::string& hold_id, store::LedgerRow& r) {
  if (!j.is_object() || !j.contains("hold_id") || !j["hold_id"].is_string() || j["hold_id"].get<std::string>().empty())
    return false;
  try {
    hold_id = j.at("hold_id").get<std::string>();
    r.budget_id = j.at("budget_id").get<std::string>();
    r.project_id = j.at("project_id").get<std::string>();
    r.sandbox_id = j.at("sandbox_id").get<std::string>();
    r.key_id = j.at("key_id").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
    r.completion_tokens = j.at("completion_tokens").get<int64_t>();
    r.cost_micros = j.at("cost_micros").get<Micros>();
    r.reserved_micros = j.at("reserved_micros").get<Micros>();
    r.duration_ms = j.at("duration_ms").get<double>();
    r.status = j.at("status").get<int>();
    r.outcome = j.at("outcome").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

/// Writes `text` to `path` through a file beside it: fsync, then rename.
bool write_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::string tmp = path.string() + ".part";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  size_t off = 0;
  bool ok = true;
  while (ok && off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false; else off += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return true;
  ::unlink(tmp.c_str());
  return false;
}

}  // namespace

PendingSettles::PendingSettles(SettleFn settle, Options opts) : settle_(std::move(settle)), opts_(std::move(opts)) {}

PendingSettles::~PendingSettles() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PendingSettles::load() {
  if (opts_.journal.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(opts_.journal, ec)) return;
  auto text = read_small_file(opts_.journal.string(), 64 << 20);
  nlohmann::json doc = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  if (!doc.is_object() || !doc.contains("settles") || !doc["settles"].is_array()) {
    // Not ours to judge further: kept for an operator, out of the way of the next journal.
    const auto aside = opts_.journal.string() + ".unreadable";
    std::filesystem::rename(opts_.journal, aside, ec);
    spdlog::error("ledger: the journal of pending settles {} could not be read; moved to {}", opts_.journal.string(),
                  aside);
    return;
  }
  size_t bad = 0;
  for (const auto& j : doc["settles"]) {
    Item it;
    if (from_json(j, it.hold_id, it.row) && items_.size() < kMaxPending) items_.push_back(std::move(it));
    else ++bad;
  }
  if (bad) {
    spdlog::error("ledger: {} entries of the journal {} could not be read and are dropped", bad, opts_.journal.string());
    save_locked();
  }
  if (!items_.empty())
    spdlog::warn("ledger: {} settles of calls made before this process started are pending; trying them now",
                 items_.size());
}

void PendingSettles::start() {
  std::lock_guard lk(mu_);
  load();
  pending_gauge().set(static_cast<double>(items_.size()));
  thread_ = std::thread([this] { run(); });
}

void PendingSettles::settle(const std::string& hold_id, const store::LedgerRow& row) {
  auto w = settle_(hold_id, row);
  if (w) return;
  if (w.error().code != ErrorCode::kNodeUnavailable) {
    spdlog::error("ledger: could not settle the call of {} on {} (hold {}): {}", format_usd(row.cost_micros),
                  row.budget_id, hold_id, w.error().message);
    return;
  }
  std::lock_guard lk(mu_);
  if (items_.size() >= kMaxPending) {
    spdlog::error("ledger: {} settles already wait for the store; the call of {} on {} (hold {}) is not kept",
                  items_.size(), format_usd(row.cost_micros), row.budget_id, hold_id);
    return;
  }
  spdlog::warn("ledger: the store cannot be reached ({}); the settle of hold {} waits for it", w.error().message, hold_id);
  items_.push_back(Item{hold_id, row});
  save_locked();
  pending_gauge().set(static_cast<double>(items_.size()));
  cv_.notify_all();
}

size_t PendingSettles::pending() const {
  std::lock_guard lk(mu_);
  return items_.size();
}

bool PendingSettles::try_all() {
  std::vector<Item> batch;
  {
    std::lock_guard lk(mu_);
    batch = items_;
  }
  std::vector<std::string> done;
  for (const auto& it : batch) {
    auto w = settle_(it.hold_id, it.row);
    if (w) {
      done.push_back(it.hold_id);
      continue;
    }
    if (w.error().code == ErrorCode::kNodeUnavailable) break;  // still away: the rest waits too
    spdlog::error("ledger: could not settle the call of {} on {} (hold {}): {}; dropped", format_usd(it.row.cost_micros),
                  it.row.budget_id, it.hold_id, w.error().message);
    done.push_back(it.hold_id);
  }
  std::lock_guard lk(mu_);
  if (!done.empty()) {
    std::erase_if(items_, [&](const Item& it) { return std::find(done.begin(), done.end(), it.hold_id) != done.end(); });
    save_locked();
    pending_gauge().set(static_cast<double>(items_.size()));
    spdlog::info("ledger: {} pending settles written; {} still wait", done.size(), items_.size());
  }
  return items_.empty();
}

void PendingSettles::run() {
  int wait_ms = opts_.first_retry_ms;
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (items_.empty()) {
      wait_ms = opts_.first_retry_ms;
      cv_.wait(lk, [&] { return stop_ || !items_.empty(); });
      continue;
    }
    cv_.wait_for(lk, std::chrono::milliseconds(wait_ms), [&] { return stop_; });
    if (stop_) break;
    lk.unlock();
    const bool empty = try_all();
    lk.lock();
    wait_ms = empty ? opts_.first_retry_ms : std::min(wait_ms * 2, opts_.max_retry_ms);
  }
}

void PendingSettles::save_locked() {
  if (opts_.journal.empty()) return;
  std::error_code ec;
  if (items_.empty()) {
    std::filesystem::remove(opts_.journal, ec);
    return;
  }
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& it : items_) arr.push_back(to_json(it.hold_id, it.row));
  const nlohmann::json doc = {{"version", 1}, {"settles", std::move(arr)}};
  if (!write_atomically(opts_.journal, doc.dump()))
    spdlog::error("ledger: could not write the journal of pending settles {}: {} settles are kept in memory only",
                  opts_.journal.string(), items_.size());
}

}  // namespace b3os::gateway
