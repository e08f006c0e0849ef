// b3os-image-import: the image importer alone, for benchmarks and for trying an archive by hand.
//
//   b3os-image-import [--setuid allow|strip|refuse] [--max-layer-bytes N] [--max-total-bytes N]
//                     [--max-entries N] ARCHIVE DEST
//
// DEST is made if missing and must be empty. Prints what the import found and its wall time;
// on an error prints it, removes what it wrote into DEST, and exits 1 (2 for bad usage).

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "daemon/image/image.h"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: b3os-image-import [--setuid allow|strip|refuse] [--max-layer-bytes N] "
               "[--max-total-bytes N] [--max-entries N] ARCHIVE DEST\n");
  return 2;
}

std::string list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace b3os;
  image::Limits limits;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--setuid" && has_value) {
      const std::string_view v = argv[++i];
      if (v == "allow") limits.setuid = image::Setuid::kAllow;
      else if (v == "strip") limits.setuid = image::Setuid::kStrip;
      else if (v == "refuse") limits.setuid = image::Setuid::kRefuse;
      else return usage();
    } else if (a == "--max-layer-bytes" && has_value) {
      limits.max_layer_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--max-total-bytes" && has_value) {
      limits.max_total_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--max-entries" && has_value) {
      limits.max_entries = std::strtoull(argv[++i], nullptr, 10);
    } else if (a.starts_with("--")) {
      return usage();
    } else {
      args.emplace_back(a);
    }
  }
  if (args.size() != 2) return usage();
  const std::string& archive = args[0];
  const std::string& dest = args[1];
  if (::mkdir(dest.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "b3os-image-import: mkdir %s: %s\n", dest.c_str(), std::strerror(errno));
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  auto cfg = image::import(archive, dest, limits, [](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!cfg) {
    std::fprintf(stderr, "b3os-image-import: %s\n", cfg.error().message.c_str());
    if (auto r = image::remove_tree(dest); !r) std::fprintf(stderr, "b3os-image-import: %s\n", r.error().message.c_str());
    return 1;
  }
  std::printf("format %s\nlayers %d\nentries %llu\nbytes %llu\nseconds %.3f\n", cfg->format.c_str(), cfg->layers,
              static_cast<unsigned long long>(cfg->entries), static_cast<unsigned long long>(cfg->bytes), secs);
  std::printf("entrypoint %s\ncmd %s\nenv %s\nworkdir %s\nuser %s\nexposed_ports %s\n", list(cfg->entrypoint).c_str(),
              list(cfg->cmd).c_str(), list(cfg->env).c_str(), cfg->workdir.c_str(), cfg->user.c_str(),
              list(cfg->exposed_ports).c_str());
  return 0;
}
