#include "agent/identity.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <optional>

#include "agent/log.h"
#include "agent/request.h"

namespace b3os::agent {

namespace {

constexpr char kAgentName[] = "b3os-agent 0.1";
constexpr size_t kMaxHostname = 64;

std::string random_hex(size_t n) {
  std::string raw(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(raw.data() + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r < 0 && errno != EINTR) {
      break;
    }
  }
  if (got < n) {
    // getrandom cannot fail on any kernel runsc supports; a boot id only has to be unique.
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x =
        static_cast<uint64_t>(ts.tv_sec) * 1000000007ull ^ static_cast<uint64_t>(ts.tv_nsec);
    for (size_t i = got; i < n; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      raw[i] = static_cast<char>(x >> 56);
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// `create` is false for /dev/urandom: a missing device must not turn into a regular file.
Result<void> write_file(const char* path, std::string_view content, bool create = true) {
  const int flags = O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0);
  const int fd = ::open(path, flags, 0644);
  if (fd < 0) return fail(errno_error(ErrorCode::kInternal, std::string("open ") + path, errno));
  size_t off = 0;
  while (off < content.size()) {
    const ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return fail(errno_error(ErrorCode::kInternal, std::string("write ") + path, err));
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    return fail(errno_error(ErrorCode::kInternal, std::string("close ") + path, errno));
  }
  return {};
}

bool has_control_chars(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

std::string hello_payload() {
  return dump_json(Json{{"version", 1}, {"agent", kAgentName}, {"boot_id", random_hex(16)}});
}

Result<void> apply_identity(std::string_view payload) {
  auto req = parse_request(payload);
  if (!req) return fail(req.error());
  auto hostname = get_string(*req, "hostname", std::string());
  if (!hostname) return fail(hostname.error());
  auto machine_id = get_string(*req, "machine_id", std::string());
  if (!machine_id) return fail(machine_id.error());
  auto seed = get_string(*req, "seed", std::string());
  if (!seed) return fail(seed.error());
  if (hostname->size() > kMaxHostname || has_control_chars(*hostname)) {
    return fail(ErrorCode::kInvalidRequest, "invalid hostname");
  }
  if (has_control_chars(*machine_id)) return fail(ErrorCode::kInvalidRequest, "invalid machine_id");

  std::optional<Error> first;
  auto note = [&first](const Result<void>& r) {
    if (!r && !first) first = r.error();
  };
  if (!hostname->empty()) {
    if (::sethostname(hostname->data(), hostname->size()) != 0) {
      note(fail(errno_error(ErrorCode::kInternal, "sethostname", errno)));
    }
    note(write_file("/etc/hostname", *hostname + "\n"));
  }
  if (!machine_id->empty()) note(write_file("/etc/machine-id", *machine_id + "\n"));
  // Writing to /dev/urandom mixes the bytes into the pool without crediting entropy, which is
  // all a fork needs: its pool must diverge from its siblings restored from the same image.
  if (!seed->empty()) note(write_file("/dev/urandom", *seed, false));
  if (first) {
    log_line("identity: %s", first->message.c_str());
    return fail(*first);
  }
  return {};
}

std::string identity_ack_payload(const Result<void>& r) {
  return r ? dump_json(Json{{"ok", true}}) : dump_json(error_json(r.error()));
}

}  // namespace b3os::agent
