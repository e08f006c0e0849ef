#pragma once
// Who may call what: one table of every route b3osd serves, on every listener, with the kinds
// of credential each accepts (docs/api.md, "Credentials"). The API's dispatchers ask it before
// a handler runs; tests/e2e/access_walk.py walks it with every kind of credential, and a unit
// test fails when a REST route has no row (or a row no route).

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/sandbox/types.h"

namespace b3os::api::access {

/// The kinds a route may accept. kApiKey and kEnvdToken are sandbox::CredentialKind's; the
/// others are checked by the listeners that own them (the preview server, the internal one).
enum class Kind {
  kNone,          // no credential (GET /healthz, the metrics listener)
  kApiKey,        // a project's b3os_sk_ or e2b_ key
  kEnvdToken,     // the named sandbox's envd access token, or a /files URL it signed
  kPortToken,     // a port's token (URL, cookie, or E2B's traffic token): that port only
  kClusterSignature,  // the cluster secret's signature (internal listener)
};

/// The pattern of E2B's control plane's one row.
inline constexpr std::string_view kE2bControlPattern = "<E2B control plane: /sandboxes, /v2/sandboxes, /templates, ...>";

struct Rule {
  std::string_view surface;  // "rest", "infer", "mcp", "e2b-control", "envd", "preview", "internal", "health", "metrics"
  std::string_view method;   // "*": any
  std::string_view pattern;  // a path pattern ({sbx}, {tpl}, ...), or a description in <>
  std::vector<Kind> kinds;   // what it accepts (kClusterSignature before an API key on the internal listener)
};

/// Every rule, in the order of docs/api.md's table.
const std::vector<Rule>& rules();

/// The rule of a route of `surface` with `method` and `pattern` (as routes() names them);
/// nullptr when there is none.
const Rule* find(std::string_view surface, std::string_view method, std::string_view pattern);

/// True when `rule` accepts a principal of `kind`.
bool admits(const Rule& rule, sandbox::CredentialKind kind);

/// The table as JSON text ({"rules": [{"surface","method","pattern","kinds":[...]}]}), for
/// `b3osd --print-access` and the walk.
std::string to_json();

std::string_view kind_name(Kind k);

}  // namespace b3os::api::access
