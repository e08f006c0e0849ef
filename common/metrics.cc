#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace b3os::metrics {

void Gauge::add(double d) { v_.fetch_add(d, std::memory_order_relaxed); }

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

const std::vector<double>& latency_buckets() {
  static const std::vector<double> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                               0.25,   0.5,   1,      2.5,   5,    10,    30,    60};
  return kBuckets;
}

template <class T>
std::unique_ptr<T> Family<T>::make() const {
  if constexpr (std::is_same_v<T, Histogram>)
    return std::make_unique<Histogram>(bounds_);
  else
    return std::make_unique<T>();
}

template <class T>
T& Family<T>::with(const Labels& values) {
  std::lock_guard lk(mu_);
  Labels key = values;
  key.resize(label_names_.size());  // a caller's slip never makes a malformed sample
  auto it = series_.find(key);
  if (it != series_.end()) return *it->second;
  if (series_.size() >= kMaxSeries) key.assign(label_names_.size(), "other");
  auto& slot = series_[key];
  if (!slot) slot = make();
  return *slot;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

/// The shortest text that reads back as the same double (std::to_chars): 0.1 stays "0.1", and
/// a long-lived sum keeps all its digits.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

/// `{a="x",b="y"}` (empty for no labels), with `extra` (le="...") appended.
std::string label_set(const std::vector<std::string>& names, const Labels& values, std::string_view extra = {}) {
  if (names.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += ',';
    out += names[i] + "=\"" + escape_label(i < values.size() ? values[i] : "") + "\"";
  }
  if (!extra.empty()) {
    if (!names.empty()) out += ',';
    out += extra;
  }
  return out + "}";
}

void head(std::string& out, const std::string& name, const std::string& help, std::string_view type) {
  out += "# HELP " + name + " ";
  for (char c : help) {  // HELP escapes only \ and newline
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  out += "\n# TYPE " + name + " ";
  out += type;
  out += '\n';
}

}  // namespace

Family<Counter>& Registry::counter(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  std::lock_guard lk(mu_);
  auto& f = counters_[name];
  if (!f) f = std::make_unique<Family<Counter>>(name, help, std::move(labels));
  return *f;
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  std::lock_guard lk(mu_);
  auto& f = gauges_[name];
  if (!f) f = std::make_unique<Family<Gauge>>(name, help, std::move(labels));
  return *f;
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                                       const std::vector<double>& bounds) {
  std::lock_guard lk(mu_);
  auto& f = histograms_[name];
  if (!f) f = std::make_unique<Family<Histogram>>(name, help, std::move(labels), bounds);
  return *f;
}

void Registry::collect(Collected c) {
  std::lock_guard lk(mu_);
  std::string name = c.name;
  collected_[name] = std::move(c);
}

std::string Registry::render() const {
  // name -> its text, so the output is sorted by name whatever the kind.
  std::map<std::string, std::string> parts;
  std::vector<Collected> collected;
  {
    std::lock_guard lk(mu_);
    // Counters and gauges: one sample per series. Named pairs, not structured bindings:
    // clang 14 (the fuzz build) lets no lambda capture one.
    auto simple = [&](const auto& families, std::string_view type) {
      for (auto& entry : families) {
        const std::string& name = entry.first;
        const auto& f = entry.second;
        std::string& out = parts[name];
        head(out, name, f->help(), type);
        f->each([&](const Labels& l, const auto& series) {
          out += name + label_set(f->label_names(), l) + " " + number(static_cast<double>(series.value())) + "\n";
        });
      }
    };
    simple(counters_, "counter");
    simple(gauges_, "gauge");
    for (auto& entry : histograms_) {
      const std::string& name = entry.first;
      const auto& f = entry.second;
      std::string& out = parts[name];
      head(out, name, f->help(), "histogram");
      f->each([&](const Labels& l, const Histogram& h) {
        const auto s = h.snapshot();
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          const std::string le = "le=\"" + (i < h.bounds().size() ? number(h.bounds()[i]) : std::string("+Inf")) + "\"";
          out += name + "_bucket" + label_set(f->label_names(), l, le) + " " + number(static_cast<double>(s.cumulative[i])) + "\n";
        }
        out += name + "_sum" + label_set(f->label_names(), l) + " " + number(s.sum) + "\n";
        out += name + "_count" + label_set(f->label_names(), l) + " " + number(static_cast<double>(s.count)) + "\n";
      });
    }
    for (auto& [name, c] : collected_) collected.push_back(c);
  }
  // Collectors run outside the registry's lock: they take their own module's locks.
  for (auto& c : collected) {
    std::vector<std::pair<Labels, double>> samples;
    if (c.read) c.read(samples);
    std::sort(samples.begin(), samples.end());
    std::string& out = parts[c.name];
    head(out, c.name, c.help, "gauge");
    for (auto& [l, v] : samples) out += c.name + label_set(c.label_names, l) + " " + number(v) + "\n";
  }
  std::string all;
  for (auto& [name, text] : parts) all += text;
  return all;
}

Registry& metrics() {
  static Registry* r = new Registry;  // never destroyed: threads may record until _Exit
  return *r;
}

}  // namespace b3os::metrics
