// b3os shell ID: an interactive terminal in a sandbox (docs/api.md, "Terminal"). One thread,
// one io_context: the WebSocket (Beast), the local terminal's input and SIGWINCH. The local
// terminal is put in raw mode and restored on every way out (a guard, and a handler for the
// signals that end the CLI).

#include "cli/shell.h"

#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <iostream>
#include <optional>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "cli/commands.h"

namespace b3os::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = boost::beast::websocket;
using tcp = asio::ip::tcp;

namespace {

// The terminal as it was, restored however the CLI ends.
struct RawMode {
  bool on = false;
  termios saved{};
  void enter() {
    if (!::isatty(0) || ::tcgetattr(0, &saved) != 0) return;
    termios raw = saved;
    ::cfmakeraw(&raw);
    if (::tcsetattr(0, TCSANOW, &raw) == 0) on = true;
  }
  void leave() {
    if (on) ::tcsetattr(0, TCSANOW, &saved);
    on = false;
  }
  ~RawMode() { leave(); }
};

RawMode* g_raw = nullptr;
void restore_and_die(int sig) {
  if (g_raw) g_raw->leave();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::pair<int, int> local_size() {
  winsize w{};
  if (::ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_row > 0 && w.ws_col > 0) return {w.ws_row, w.ws_col};
  return {24, 80};
}

}  // namespace

int run_shell(const ApiUrl& url, const std::string& api_key, const ShellOptions& o) {
  asio::io_context ioc;
  ws::stream<tcp::socket> sock(ioc);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto addrs = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) {
    std::cerr << "b3os: " << url.original << ": " << ec.message() << "\n";
    return 1;
  }
  asio::connect(sock.next_layer(), addrs, ec);
  if (ec) {
    std::cerr << "b3os: cannot reach b3osd at " << url.original << ": " << ec.message() << "\n";
    return 1;
  }
  auto [rows, cols] = local_size();
  std::string target = url.target("/v1/sandboxes/" + o.id + "/pty") + "?rows=" + std::to_string(rows) +
                       "&cols=" + std::to_string(cols);
  if (const char* term = std::getenv("TERM"); term && *term) target += "&term=" + url_encode(term);
  if (!o.cwd.empty()) target += "&cwd=" + url_encode(o.cwd);
  if (!o.user.empty()) target += "&user=" + url_encode(o.user);
  if (!o.cmd.empty()) target += "&cmd=" + url_encode(o.cmd);
  sock.set_option(ws::stream_base::decorator([&](ws::request_type& req) {
    if (!api_key.empty()) req.set(beast::http::field::authorization, "Bearer " + api_key);
    req.set(beast::http::field::user_agent, "b3os-cli");
  }));
  ws::response_type res;
  sock.handshake(res, url.host_header(), target, ec);
  if (ec) {
    // Refused before the upgrade: the API's JSON error is in the body, said as every command
    // says one (and the same exit status, kExitFailure).
    const Json body = Json::parse(res.body(), nullptr, false);
    if (body.is_object() && body.contains("error") && body["error"].is_object()) {
      const Json& e = body["error"];
      std::cerr << "error: " << e.value("code", std::string("error")) << ": " << e.value("message", std::string()) << "\n";
    } else {
      std::cerr << "error: " << (res.body().empty() ? ec.message() : res.body()) << "\n";
    }
    return kExitFailure;
  }

  RawMode raw;
  g_raw = &raw;
  raw.enter();
  for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGQUIT}) ::signal(sig, restore_and_die);

  int exit_code = 1;
  bool got_exit = false;
  asio::posix::stream_descriptor in(ioc, ::dup(0));
  asio::signal_set winch(ioc, SIGWINCH);
  std::array<char, 4096> in_buf{};
  beast::flat_buffer rbuf;
  std::deque<std::pair<std::string, bool>> out;  // messages to b3osd, in order
  bool writing = false;

  std::function<void()> write_next = [&] {
    if (writing || out.empty()) return;
    writing = true;
    sock.binary(out.front().second);
    sock.async_write(asio::buffer(out.front().first), [&](beast::error_code e, size_t) {
      writing = false;
      out.pop_front();
      if (!e) write_next();
    });
  };
  auto send = [&](std::string m, bool binary) {
    out.emplace_back(std::move(m), binary);
    write_next();
  };
  std::function<void()> read_stdin = [&] {
    in.async_read_some(asio::buffer(in_buf), [&](beast::error_code e, size_t n) {
      if (e) return;  // stdin closed: the remote shell carries on until it ends
      send(std::string(in_buf.data(), n), true);
      read_stdin();
    });
  };
  std::function<void()> on_winch = [&] {
    winch.async_wait([&](beast::error_code e, int) {
      if (e) return;
      auto [r, c] = local_size();
      send(Json{{"type", "resize"}, {"rows", r}, {"cols", c}}.dump(), false);
      on_winch();
    });
  };
  std::function<void()> read_ws = [&] {
    sock.async_read(rbuf, [&](beast::error_code e, size_t) {
      if (e) {
        in.cancel();
        winch.cancel();
        return;
      }
      const auto d = rbuf.data();
      std::string_view msg(static_cast<const char*>(d.data()), d.size());
      if (sock.got_binary()) {
        (void)!::write(1, msg.data(), msg.size());
      } else {
        Json j = Json::parse(msg, nullptr, false);
        if (j.is_object() && j.value("type", "") == "exit") {
          got_exit = true;
          exit_code = j.value("exit_code", 1);
        }
      }
      rbuf.consume(rbuf.size());
      read_ws();
    });
  };
  read_ws();
  read_stdin();
  on_winch();
  ioc.run();
  raw.leave();
  g_raw = nullptr;
  if (!got_exit) {
    std::cerr << "\r\nb3os: the terminal closed without its exit status\n";
    return 1;
  }
  return exit_code < 0 ? 1 : (exit_code > 255 ? 255 : exit_code);
}

}  // namespace b3os::cli
