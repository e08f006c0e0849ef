// `b3os status`: the node at a glance for a person at a terminal, read from b3osd's /healthz
// and its /metrics listener (no API key needed: both are the operator's, on the node).

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/commands.h"

namespace b3os::cli {

std::vector<Sample> parse_metrics_text(std::string_view text) {
  std::vector<Sample> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        std::string key(line.substr(i, eq - i));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i < line.size() && line[i] == '}') ++i;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    const std::string number(line.substr(i, line.find(' ', i) - i));
    char* stop = nullptr;
    s.value = std::strtod(number.c_str(), &stop);
    if (number.empty() || stop == number.c_str()) continue;  // not a sample line
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string fmt_duration(double seconds) {
  const long s = static_cast<long>(seconds);
  char buf[48];
  if (s >= 86400)
    std::snprintf(buf, sizeof buf, "%ldd %ldh", s / 86400, s % 86400 / 3600);
  else if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh %ldm", s / 3600, s % 3600 / 60);
  else
    std::snprintf(buf, sizeof buf, "%ldm %lds", s / 60, s % 60);
  return buf;
}

/// The samples of `name`, whose labels include `match`.
std::vector<const Sample*> find(const std::vector<Sample>& all, std::string_view name,
                                const std::map<std::string, std::string>& match = {}) {
  std::vector<const Sample*> out;
  for (auto& s : all) {
    if (s.name != name) continue;
    bool ok = true;
    for (auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) out.push_back(&s);
  }
  return out;
}

double sum(const std::vector<Sample>& all, std::string_view name, const std::map<std::string, std::string>& match = {}) {
  double t = 0;
  for (auto* s : find(all, name, match)) t += s->value;
  return t;
}

std::string label(const Sample& s, const std::string& k) {
  auto it = s.labels.find(k);
  return it == s.labels.end() ? "" : it->second;
}

}  // namespace

std::string render_status(const std::string& api_url, const std::string& health, const std::vector<Sample>& m,
                          double now_unix_s) {
  std::ostringstream o;
  std::string version = "?";
  if (auto b = find(m, "b3os_build_info"); !b.empty()) version = label(*b[0], "version");
  o << "b3osd " << version << " at " << api_url << ": " << health;
  if (auto st = find(m, "b3os_start_time_seconds"); !st.empty() && now_unix_s > st[0]->value)
    o << " (up " << fmt_duration(now_unix_s - st[0]->value) << ")";
  o << "\n";

  auto cap = [&](const char* kind) { return sum(m, "b3os_node_capacity", {{"kind", kind}}); };
  const double max = cap("max"), used = cap("live") + cap("starting") + cap("pooled");
  o << "capacity:  " << fmt_num(cap("live")) << " live, " << fmt_num(cap("starting")) << " starting, "
    << fmt_num(cap("pooled")) << " pool members: " << fmt_num(used) << " of " << fmt_num(max) << " sandboxes";
  if (max > 0) o << " (" << fmt_num(std::round(100 * used / max)) << "%)";
  o << "\n";
  // What sandboxes commit (their limits) against what the node admits (0: no limit).
  if (!find(m, "b3os_node_committed").empty()) {
    o << "committed:";
    const char* sep = " ";
    for (auto [res, unit] : {std::pair{"memory_mib", " MiB memory"}, std::pair{"vcpu", " vCPUs"},
                             std::pair{"disk_gib", " GiB disk"}}) {
      const double c = sum(m, "b3os_node_committed", {{"resource", res}});
      const double a = sum(m, "b3os_node_admits", {{"resource", res}});
      o << sep << fmt_num(c) << (a > 0 ? " of " + fmt_num(a) : std::string()) << unit;
      if (a > 0) o << " (" << fmt_num(std::round(100 * c / a)) << "%)";
      sep = ", ";
    }
    o << "\n";
  }

  std::map<std::string, std::map<std::string, double>> by_state;  // state -> template -> n
  for (auto* s : find(m, "b3os_sandboxes")) by_state[label(*s, "state")][label(*s, "template")] += s->value;
  o << "sandboxes:";
  if (by_state.empty()) o << " none";
  for (auto& [state, tpls] : by_state) {
    double n = 0;
    std::string parts;
    for (auto& [t, c] : tpls) {
      n += c;
      parts += (parts.empty() ? "" : ", ") + t + " " + fmt_num(c);
    }
    o << " " << state << " " << fmt_num(n) << " (" << parts << ")";
  }
  o << "\n";

  o << "pools:    ";
  for (const char* p : {"warm", "fork", "net_warm", "net_fork", "fork_ahead"}) {
    const double target = sum(m, "b3os_pool_target", {{"pool", p}});
    if (target <= 0) {
      o << " " << p << " off";
      continue;
    }
    o << " " << p << " " << fmt_num(sum(m, "b3os_pool_size", {{"pool", p}})) << "/" << fmt_num(target);
    const double hit = sum(m, "b3os_pool_claims_total", {{"pool", p}, {"outcome", "hit"}});
    const double miss = sum(m, "b3os_pool_claims_total", {{"pool", p}, {"outcome", "miss"}});
    if (hit + miss > 0) o << " (" << fmt_num(hit) << " hits, " << fmt_num(miss) << " misses)";
  }
  o << "\n";

  o << "templates:";
  auto tpls = find(m, "b3os_template_checkpoint");
  if (tpls.empty()) o << " none";
  for (auto* t : tpls) {
    o << " " << label(*t, "template") << " (checkpoint " << label(*t, "status");
    if (label(*t, "creates") != "none") o << ", creates " << label(*t, "creates");
    o << ")";
  }
  o << "\n";

  auto models = find(m, "b3os_gateway_models");
  o << "gateway:   ";
  if (models.empty()) {
    o << "no models";
  } else {
    for (size_t i = 0; i < models.size(); ++i) o << (i ? ", " : "") << label(*models[i], "model");
    o << "; " << fmt_num(sum(m, "b3os_gateway_calls_total")) << " calls, "
      << fmt_num(sum(m, "b3os_gateway_calls_total", {{"outcome", "spend_cap_reached"}})) << " refused at a cap, $";
    char usd[32];
    std::snprintf(usd, sizeof usd, "%.6f", sum(m, "b3os_gateway_spend_micros_total") / 1e6);
    o << usd << " charged";
  }
  o << "\n";

  std::map<std::string, double> fails;
  for (auto* f : find(m, "b3os_sandbox_failures_total")) fails[label(*f, "kind")] += f->value;
  o << "failures:  runsc " << fmt_num(sum(m, "b3os_runsc_failures_total")) << ", sandboxes "
    << fmt_num(sum(m, "b3os_sandbox_failures_total"));
  if (!fails.empty()) {
    std::string parts;
    for (auto& [k, n] : fails) parts += (parts.empty() ? "" : ", ") + k + " " + fmt_num(n);
    o << " (" << parts << ")";
  }
  o << " since start\n";
  const double fds = sum(m, "process_open_fds"), max_fds = sum(m, "process_max_fds");
  o << "b3osd:     " << fmt_num(fds) << " open files of " << fmt_num(max_fds) << ", "
    << fmt_num(sum(m, "process_resident_memory_bytes") / (1 << 20)) << " MiB resident\n";
  return o.str();
}

namespace {

int run_status(const GlobalOptions& g, const std::string& metrics_url) {
  auto api = parse_api_url(g.api_url);
  if (!api) return report_error(api.error());
  HttpClient api_client(*api, "");
  std::string health;
  bool ready = false;
  if (auto h = api_client.request("GET", "/healthz", nullptr); !h) {
    health = "unreachable (" + h.error().message + ")";
  } else {
    auto j = nlohmann::json::parse(h->body, nullptr, false);
    health = j.is_object() && j.contains("status") && j["status"].is_string() ? j["status"].get<std::string>()
                                                                              : "HTTP " + std::to_string(h->status);
    ready = h->status == 200;
  }
  auto murl = parse_api_url(metrics_url);
  if (!murl) return report_error(murl.error());
  HttpClient metrics_client(*murl, "");
  auto r = metrics_client.request("GET", "/metrics", nullptr);
  if (!r || r->status != 200) {
    std::cout << "b3osd at " << g.api_url << ": " << health << "\n";
    std::cerr << "error: no metrics from " << metrics_url << "/metrics ("
              << (r ? "HTTP " + std::to_string(r->status) : r.error().message)
              << "); b3osd serves them on --metrics-listen (default 127.0.0.1:7071), or pass --metrics-url\n";
    return kExitFailure;
  }
  std::cout << render_status(g.api_url, health, parse_metrics_text(r->body), static_cast<double>(std::time(nullptr)));
  return ready ? 0 : kExitFailure;
}

}  // namespace

void add_status_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  static std::string metrics_url = "http://127.0.0.1:7071";
  auto* s = app.add_subcommand("status",
                               "The node at a glance: health, capacity, sandboxes, pools, templates, gateway and "
                               "failures (from /healthz and the metrics listener; exit 1 unless ready)");
  s->add_option("--metrics-url", metrics_url, "b3osd's metrics listener (--metrics-listen)")
      ->envname("B3OS_METRICS_URL")
      ->capture_default_str();
  s->callback([&g, &action] { action = [&g] { return run_status(g, metrics_url); }; });
}

}  // namespace b3os::cli
