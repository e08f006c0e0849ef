#pragma once
// The models b3osd offers through its gateway: where each one's upstream is, what it is
// called there, how to authenticate to it and what it costs (docs/configuration.md).

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/money.h"
#include "common/result.h"

namespace b3os::gateway {

struct ModelConfig {
  std::string id;             // public id, e.g. "b3os/qwen3.5-9b"
  std::string base_url;       // upstream OpenAI-compatible base, e.g. "http://127.0.0.1:8080/v1"
  std::string host, port = "80", path_prefix;  // parsed from base_url
  std::string upstream_model; // the name the upstream knows it by (default: id)
  std::string key_env;        // upstream key from this environment variable...
  std::string key_file;       // ...or from this file (never stored, never logged)
  Micros micros_per_m_input = 0;   // price per million prompt tokens, micro-dollars
  Micros micros_per_m_output = 0;  // price per million completion tokens, micro-dollars
  int max_output_tokens = 4096; // worst case when a request names no max_tokens
  int timeout_s = 120;          // a whole call, upstream connect to last byte
  bool is_default = false;

  /// What `prompt` and `completion` tokens cost: (prompt x in + completion x out) / 10^6,
  /// rounded up to the next micro-dollar, so that no call costs less than its tokens and
  /// rounding can never take spend past a cap (docs/gateway.md). Exact: no floating point.
  Micros cost(int64_t prompt_tokens, int64_t completion_tokens) const;
  /// The upstream key, read now from the environment or the file ("" when none).
  Result<std::string> upstream_key() const;
  /// {"id","object":"model","created","owned_by"} as /models lists it.
  nlohmann::json to_openai() const;
};

/// Parses one --model flag: ID=BASE_URL[,upstream=NAME][,in=USD][,out=USD][,key-env=VAR]
/// [,key-file=PATH][,max-output=N][,timeout=S][,default].
Result<ModelConfig> parse_model_flag(const std::string& flag);
/// Reads a models file: {"models":[{"id","base_url","upstream_model","usd_per_m_input",
/// "usd_per_m_output","key_env","key_file","max_output_tokens","timeout_s","default"}]}.
Result<std::vector<ModelConfig>> load_models_file(const std::string& path);
/// Checks a set of models (unique ids, at most one default; the first is the default when
/// none is marked) and returns it with `is_default` set.
Result<std::vector<ModelConfig>> finalize_models(std::vector<ModelConfig> models);

}  // namespace b3os::gateway
