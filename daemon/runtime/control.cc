#include "daemon/runtime/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/fd_passing.h"

namespace b3os::runtime {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// runsc versions whose control messages were read from their source and checked by hand
// (strace of the CLI) against what this file sends: Debian bookworm-backports' runsc, and the
// same release as gVisor's own builds name it.
constexpr std::array<std::string_view, 2> kKnownVersions = {"0.0~20240729.0", "release-20240729.0"};

// The server accepts at most 128 files per call (urpc's maxFiles).
constexpr size_t kMaxFds = 128;
// A reply larger than this is not one of the replies the calls here expect.
constexpr size_t kMaxReply = 1 << 20;

int poll_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long>(left, 1 << 30));
}

// Waits until `fd` is ready for `events`; false on timeout.
Result<bool> wait_ready(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int n = ::poll(&p, 1, poll_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return fail(errno_error(ErrorCode::kInternal, "poll", errno));
  }
}

}  // namespace

long json_object_length(std::string_view buf) {
  size_t i = 0;
  while (i < buf.size() && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) ++i;
  if (i == buf.size()) return 0;
  if (buf[i] != '{') return -1;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (; i < buf.size(); ++i) {
    const char c = buf[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return static_cast<long>(i + 1);
    }
  }
  return 0;
}

Result<ControlConnection> ControlConnection::connect(const std::string& socket_path) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock) return fail(errno_error(ErrorCode::kInternal, "control socket", errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // A path too long for sun_path is reached through an O_PATH fd of it, as runsc does.
  UniqueFd path_fd;
  std::string target = socket_path;
  if (target.size() >= sizeof(addr.sun_path)) {
    path_fd.reset(::open(socket_path.c_str(), O_PATH | O_CLOEXEC));
    if (!path_fd) return fail(errno_error(ErrorCode::kInternal, "open " + socket_path, errno));
    target = "/proc/self/fd/" + std::to_string(path_fd.get());
  }
  std::memcpy(addr.sun_path, target.data(), target.size());
  // A non-blocking unix stream connect completes at once, or fails with EAGAIN while the
  // listener's backlog is full: retried for up to 2 s, as a blocking connect would wait.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    if ((err != EAGAIN && err != EINTR) || Clock::now() >= deadline) {
      return fail(errno_error(ErrorCode::kInternal, "connect to the sandbox control socket " + socket_path, err));
    }
    ::usleep(1000);
  }
  return ControlConnection(std::move(sock), socket_path);
}

Result<json> ControlConnection::call(std::string_view method, const json& arg, std::span<const int> fds,
                                     std::chrono::milliseconds timeout) {
  if (fds.size() > kMaxFds) return fail(ErrorCode::kInternal, "control call: too many files");
  const auto deadline = Clock::now() + timeout;
  const std::string what = "control call " + std::string(method) + " (" + path_ + ")";
  const std::string request = json{{"method", method}, {"arg", arg}}.dump();

  // The files travel with the first bytes that go out.
  size_t sent = 0;
  while (sent < request.size()) {
    iovec iov{const_cast<char*>(request.data() + sent), request.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (sent == 0 && !fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return fail(ErrorCode::kInternal, what + ": the socket took no bytes");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto ready = wait_ready(fd_.get(), POLLOUT, deadline);
      if (!ready) return fail(ready.error().wrap(what));
      if (!*ready) return fail(ErrorCode::kInternal, what + ": timed out sending");
      continue;
    }
    return fail(errno_error(ErrorCode::kInternal, what + ": send", errno));
  }

  std::string reply;
  for (;;) {
    long len = json_object_length(reply);
    if (len < 0) return fail(ErrorCode::kInternal, what + ": the reply is not a JSON object");
    if (len > 0) {
      reply.resize(static_cast<size_t>(len));
      break;
    }
    if (reply.size() > kMaxReply) return fail(ErrorCode::kInternal, what + ": reply too large");
    char buf[16384];
    iovec iov{buf, sizeof(buf)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
    if (n > 0) {
      (void)received_fds(msg);  // no call made here expects files back; any that come are closed
      reply.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return fail(ErrorCode::kInternal, what + ": the sandbox closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto ready = wait_ready(fd_.get(), POLLIN, deadline);
      if (!ready) return fail(ready.error().wrap(what));
      if (!*ready) return fail(ErrorCode::kInternal, what + ": no answer within " + std::to_string(timeout.count()) + " ms");
      continue;
    }
    return fail(errno_error(ErrorCode::kInternal, what + ": receive", errno));
  }

  json r = json::parse(reply, nullptr, false);
  if (r.is_discarded() || !r.is_object()) return fail(ErrorCode::kInternal, what + ": unreadable reply");
  const auto success = r.find("success");
  if (success == r.end() || !success->is_boolean()) return fail(ErrorCode::kInternal, what + ": reply without success");
  if (!success->get<bool>()) {
    const auto err = r.find("err");
    return fail(ErrorCode::kInternal, what + " failed: " + (err != r.end() && err->is_string() ? err->get<std::string>() : "no reason given"));
  }
  const auto result = r.find("result");
  return result == r.end() ? json() : *result;
}

json loopback_links_arg() {
  const json no_route = {{"Route", {{"Destination", {{"IP", ""}, {"Mask", nullptr}}}, {"Gateway", ""}}}, {"Name", ""}};
  return json{
      {"LoopbackLinks",
       {{{"Name", "lo"},
         {"Addresses", {{{"Address", "127.0.0.1"}, {"PrefixLen", 8}}, {{"Address", "::1"}, {"PrefixLen", 128}}}},
         // Masks are Go []byte, so base64: ff000000 (/8) and sixteen ff bytes (/128).
         {"Routes",
          {{{"Destination", {{"IP", "127.0.0.0"}, {"Mask", "/wAAAA=="}}}, {"Gateway", ""}},
           {{"Destination", {{"IP", "::1"}, {"Mask", "/////////////////////w=="}}}, {"Gateway", ""}}}},
         {"GVisorGRO", false}}}},
      {"FDBasedLinks", nullptr},
      {"XDPLinks", nullptr},
      {"Defaultv4Gateway", no_route},
      {"Defaultv6Gateway", no_route},
      {"PCAP", false},
      {"LogPackets", false},
      {"NATBlob", false},
      {"DisconnectOk", false},
  };
}

namespace {
std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(in[i])) << 16) | (i + 1 < in.size() ? uint32_t(uint8_t(in[i + 1])) << 8 : 0) |
                       (i + 2 < in.size() ? uint32_t(uint8_t(in[i + 2])) : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::string dotted(uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." + std::to_string((a >> 8) & 255) + "." +
         std::to_string(a & 255);
}
}  // namespace

json sandbox_links_arg(const PacketLink& link) {
  json arg = loopback_links_arg();
  const uint32_t mask = link.prefix == 0 ? 0 : ~uint32_t{0} << (32 - link.prefix);
  const std::string mask_bytes = {char(mask >> 24), char((mask >> 16) & 255), char((mask >> 8) & 255), char(mask & 255)};
  arg["FDBasedLinks"] = json::array({{
      {"Name", "eth0"},
      {"InterfaceIndex", 0},
      {"MTU", link.mtu},
      {"Addresses", {{{"Address", dotted(link.addr)}, {"PrefixLen", link.prefix}}}},
      {"Routes", {{{"Destination", {{"IP", dotted(link.addr & mask)}, {"Mask", base64(mask_bytes)}}}, {"Gateway", ""}}}},
      {"GSOMaxSize", 65536},
      {"GVisorGSOEnabled", false},
      {"GVisorGRO", false},
      {"TXChecksumOffload", false},
      {"RXChecksumOffload", true},
      {"LinkAddress", base64(link.mac)},
      {"QDisc", 1},
      {"Neighbors", nullptr},
      {"NumChannels", 1},
      {"ProcessorsPerChannel", 0},
  }});
  // The CLI's default route: 0.0.0.0 with Go's 16-byte form of a zero IPv4 mask.
  arg["Defaultv4Gateway"] = {
      {"Route", {{"Destination", {{"IP", "0.0.0.0"}, {"Mask", "AAAAAAAAAAAAAP//AAAAAA=="}}}, {"Gateway", dotted(link.gateway)}}},
      {"Name", "eth0"}};
  arg["DisconnectOk"] = true;
  return arg;
}

bool control_protocol_known(std::string_view runsc_version) {
  for (auto v : kKnownVersions)
    if (runsc_version == v) return true;
  return false;
}

}  // namespace b3os::runtime
