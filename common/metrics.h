#pragma once
// Process-wide metrics in the Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms in labelled families, and collectors that read a value when the
// node is scraped (sandboxes by state, pool sizes). Any module records into `metrics()`;
// b3osd serves `render()` at /metrics (docs/operations.md lists every metric).
//
// Written here rather than taken from a library: Debian 12 packages no C++ Prometheus client
// (prometheus-cpp is not in bookworm), and the format is a few lines of text per sample.
//
// Recording into a series is atomic adds; finding a series by its label values takes the
// family's mutex for a map lookup (hot paths with fixed labels may keep the reference).
// A family holds at most kMaxSeries series: past that, new label values are counted in one
// series whose labels are all "other", so nothing a client sends can grow the node's memory
// (label values must come from a bounded set: routes, models, states; never ids).

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace b3os::metrics {

using Labels = std::vector<std::string>;

/// A value that only goes up (requests, failures, tokens, micro-dollars).
class Counter {
 public:
  void inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

/// A value that goes up and down.
class Gauge {
 public:
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  void add(double d);
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

/// Observations counted into fixed buckets, with their sum (seconds, for latencies).
class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds);
  void observe(double v);
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
};

/// Latency buckets in seconds, 0.5 ms to 60 s: exec of `true` is ~1 ms, a fork ~100 ms, a
/// cold create or a snapshot of a large sandbox seconds.
const std::vector<double>& latency_buckets();

enum class Kind { kCounter, kGauge, kHistogram };

/// One metric name with its label names and a series per set of label values.
template <class T>
class Family {
 public:
  static constexpr size_t kMaxSeries = 2000;
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> bounds = {})
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}

  /// The series of these label values (as many as the family has label names), made on
  /// first use. The reference stays valid for the life of the process.
  T& with(const Labels& values);
  T& with() { return with(Labels{}); }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  /// Calls f(labels, series) for each series, in label order.
  template <class F>
  void each(F&& f) const {
    std::lock_guard lk(mu_);
    for (auto& [labels, s] : series_) f(labels, *s);
  }

 private:
  std::unique_ptr<T> make() const;
  std::string name_, help_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<Labels, std::unique_ptr<T>> series_;
};

/// A gauge family whose samples are read when the node is scraped.
struct Collected {
  std::string name, help;
  std::vector<std::string> label_names;
  /// Appends (label values, value) pairs.
  std::function<void(std::vector<std::pair<Labels, double>>&)> read;
};

class Registry {
 public:
  Family<Counter>& counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                               const std::vector<double>& bounds = latency_buckets());
  /// Registers (or replaces, by name) a family read at scrape time.
  void collect(Collected c);
  /// Every family in the text exposition format, sorted by name.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  // Families live as long as the registry; callers keep references to them.
  std::map<std::string, std::unique_ptr<Family<Counter>>> counters_;
  std::map<std::string, std::unique_ptr<Family<Gauge>>> gauges_;
  std::map<std::string, std::unique_ptr<Family<Histogram>>> histograms_;
  std::map<std::string, Collected> collected_;
};

/// The process's registry.
Registry& metrics();

/// A label value or help text escaped for the exposition format.
std::string escape_label(std::string_view v);

}  // namespace b3os::metrics
