// libFuzzer target for egress allow entries (daemon/net/policy.h): arbitrary bytes as one
// entry, and as a list of entries (split on newlines) matched against fragments of the input.
// Whatever is accepted must be exactly what it claims to be: it re-parses from its text to
// the same entry, a name passes canonical_host unchanged, a CIDR reaches no always-denied
// address, and the parsed list allows what the entry names. Refusals name the entry and are
// valid UTF-8 (they end up in JSON answers).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/net/policy.h"

namespace {

using b3os::ErrorCode;
using b3os::net::AllowEntry;
using b3os::net::Allowlist;

void require(bool ok) {
  if (!ok) std::abort();
}

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void check_refusal(const b3os::Error& e, size_t index) {
  require(e.code == ErrorCode::kInvalidRequest || e.code == ErrorCode::kEgressDenied);
  require(e.message.rfind("egress.allow[" + std::to_string(index) + "] \"", 0) == 0);
  require(valid_utf8(e.message));
}

void check_accepted(const AllowEntry& e, std::string_view text) {
  require(e.text == text);
  require(!e.ports.empty());
  for (uint16_t p : e.ports) require(p != 0);

  auto again = b3os::net::parse_allow_entry(e.text, 7);
  require(again.has_value() && again->same_target(e) && again->text == e.text);

  const Allowlist list({e});
  switch (e.kind) {
    case AllowEntry::Kind::kCidr: {
      require((e.cidr.addr & ~e.cidr.mask()) == 0 && e.cidr.prefix >= 0 && e.cidr.prefix <= 32);
      require(b3os::net::denied_overlap(e.cidr) == nullptr);
      for (const auto& r : b3os::net::always_denied()) require(!r.net.overlaps(e.cidr));
      require(!b3os::net::denied_reason(e.cidr.addr));
      require(b3os::net::parse_cidr(e.cidr.str()) == e.cidr);
      const uint32_t last = e.cidr.addr | ~e.cidr.mask();
      for (uint16_t p : e.ports) require(list.allows_ip(e.cidr.addr, p) && list.allows_ip(last, p));
      require(list.name_ports().empty());
      break;
    }
    case AllowEntry::Kind::kName:
      require(b3os::net::canonical_host(e.name) == e.name);
      require(e.name.find('.') != std::string::npos);
      for (uint16_t p : e.ports) require(list.allows_name(e.name, p) && list.allows_name(e.name + ".", p));
      require(list.resolvable(e.name) && !list.resolvable("x." + e.name));
      require(list.name_ports() == e.ports);
      break;
    case AllowEntry::Kind::kWildcard:
      require(b3os::net::canonical_host(e.name) == e.name);
      require(e.name.find('.') != std::string::npos);
      require(!list.resolvable(e.name));
      // "x." + a 253-character suffix is too long to be a name at all.
      if (e.name.size() <= 251) require(list.resolvable("x." + e.name));
      require(list.cidr_ports().empty());
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  auto one = b3os::net::parse_allow_entry(text, 0);
  if (one) {
    check_accepted(*one, text);
  } else {
    check_refusal(one.error(), 0);
  }

  // The input as a list, one entry per line, and its fragments as what connections ask for.
  std::vector<std::string> entries;
  size_t start = 0;
  while (start <= text.size() && entries.size() < 300) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    entries.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  auto list = b3os::net::parse_allow_list(entries);
  if (!list) {
    require(list.error().code == ErrorCode::kInvalidRequest || list.error().code == ErrorCode::kEgressDenied);
    require(valid_utf8(list.error().message));
    return 0;
  }
  require(list->size() == entries.size() && entries.size() <= b3os::net::kMaxAllowEntries);
  const Allowlist allow(std::move(*list));
  const auto ports = allow.name_ports();
  for (size_t i = 1; i < ports.size(); ++i) require(ports[i - 1] < ports[i]);
  for (const std::string& q : entries) {
    for (uint16_t port : {uint16_t{80}, uint16_t{443}, uint16_t{5432}}) {
      if (allow.allows_name(q, port)) require(allow.resolvable(q));
    }
    if (auto host = b3os::net::canonical_host(q)) require(b3os::net::canonical_host(*host) == host);
    if (auto ip = b3os::net::parse_ipv4(q)) {
      if (allow.allows_ip(*ip, 443)) require(!b3os::net::denied_reason(*ip));
    }
  }
  return 0;
}
