#include "daemon/agentlink/channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"

namespace b3os::agentlink {

using protocol::Frame;
using protocol::FrameType;
using Clock = std::chrono::steady_clock;

namespace {
Error channel_error(const std::string& name, const std::string& why) {
  return Error{ErrorCode::kInternal, "agent channel " + name + ": " + why, 0};
}

// What b3osd holds of what an agent sends, whatever the agent does (docs/agent-protocol.md,
// "An untrusted agent"): JSON at most this deep; stream-0 frames waiting to be read; frames
// that are not data waiting on one stream (an honest agent sends a HEADER, an END and a few
// gap headers); queue entries of one stream (data is also bounded by the window).
constexpr size_t kMaxAgentJsonDepth = 64;
constexpr size_t kMaxControlFrames = 64;
constexpr size_t kMaxPendingOther = 1024;
constexpr size_t kMaxInbox = 16384;

// The index of a data frame type (DATA, STDOUT, STDERR) in Stream::last_data_.
size_t data_kind(FrameType t) { return t == FrameType::kData ? 0 : t == FrameType::kStdout ? 1 : 2; }

// The frame types whose payload is JSON (the rest carry bytes, a nonce or a u32).
bool carries_json(FrameType t) {
  return t == FrameType::kHello || t == FrameType::kIdentityAck || t == FrameType::kIdle || t == FrameType::kOpen ||
         t == FrameType::kHeader || t == FrameType::kEnd;
}
}  // namespace

// ---- Stream ----

Stream::~Stream() {
  bool ended;
  {
    std::lock_guard lk(mu_);
    ended = ended_ || closed_.has_value();
  }
  if (incoming()) {
    // An agent-opened stream always gets an answer, or its client would wait for ever.
    if (!ended && !end_sent_) (void)send_end({{"ok", false}, {"error", {{"code", "internal"}, {"message", "b3osd dropped the request"}}}});
  } else if (!ended) {
    // A stream dropped before its END (client went away, error path) must not leave work
    // running in the sandbox.
    cancel();
  }
  ch_->forget(id_);
}

std::string Stream::deliver(Frame f) {
  std::lock_guard lk(mu_);
  if (protocol::is_data_type(f.type)) {
    // The agent is untrusted (root in the sandbox may replace it): its data is charged against
    // the credit this side granted, and past it the channel breaks, so that what b3osd holds
    // for a stream is bounded by the window whatever the agent sends.
    recv_window_ -= static_cast<int64_t>(f.payload.size());
    if (recv_window_ < 0) return "the agent sent more data on a stream than its credit allows";
    if (f.payload.empty()) return {};  // nothing to hand on
    // Data joins the newest unread data of its kind queued since the last other frame (up to a
    // frame's size): an honest agent's many small frames, stdout and stderr interleaved, hold a
    // few queue entries, not one each. Each kind's bytes keep their order; stdout and stderr
    // queued between two other frames may be read one kind before the other (they come from two
    // pipes, with no order between them to begin with).
    const size_t kind = data_kind(f.type);
    if (const uint64_t seq = last_data_[kind]; seq != kNoEntry && seq >= popped_) {
      protocol::Frame& e = inbox_[static_cast<size_t>(seq - popped_)];
      if (e.payload.size() + f.payload.size() <= protocol::kMaxData) {
        e.payload += f.payload;
        cv_.notify_all();
        return {};
      }
    }
    if (inbox_.size() >= kMaxInbox) return "the agent sent more frames on a stream than b3osd holds";
    inbox_.push_back(std::move(f));
    last_data_[kind] = popped_ + inbox_.size() - 1;
    cv_.notify_all();
    return {};
  } else {
    last_data_.fill(kNoEntry);  // data after it is queued after it
    if (++pending_other_ > kMaxPendingOther) return "the agent sent more control frames on a stream than b3osd reads";
    if (f.type == FrameType::kEnd) ended_ = true;
    if (f.type == FrameType::kCancel && incoming()) ended_ = cancelled_ = true;
  }
  if (inbox_.size() >= kMaxInbox) return "the agent sent more frames on a stream than b3osd holds";
  inbox_.push_back(std::move(f));
  cv_.notify_all();
  return {};
}

void Stream::add_credit(uint32_t n) {
  std::lock_guard lk(mu_);
  credit_ += n;
  cv_.notify_all();
}

void Stream::close(std::string reason) {
  std::lock_guard lk(mu_);
  closed_ = std::move(reason);
  cv_.notify_all();
}

Result<Frame> Stream::next(Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  for (;;) {
    if (!inbox_.empty()) {
      Frame f = std::move(inbox_.front());
      inbox_.pop_front();
      ++popped_;
      if (!protocol::is_data_type(f.type) && pending_other_ > 0) --pending_other_;
      return f;
    }
    if (closed_) return fail(channel_error(ch_->name(), *closed_));
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && inbox_.empty()) {
      return fail(ErrorCode::kInternal, "agent channel " + ch_->name() + ": no answer from the agent in time");
    }
  }
}

Result<size_t> Stream::send_some(std::string_view bytes, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    size_t n;
    {
      std::unique_lock lk(mu_);
      for (;;) {
        if (closed_) return fail(channel_error(ch_->name(), *closed_));
        if (ended_) return fail(ErrorCode::kConflict, "the agent ended the stream");
        if (credit_ > 0) break;
        if (sent > 0) return sent;
        if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && credit_ <= 0) return sent;
      }
      n = std::min<size_t>({bytes.size() - sent, static_cast<size_t>(credit_), protocol::kMaxData});
      credit_ -= static_cast<int64_t>(n);
    }
    if (auto r = ch_->write_frame(FrameType::kData, id_, bytes.substr(sent, n), deadline); !r) return fail(r.error());
    sent += n;
  }
  return sent;
}

Result<void> Stream::send_data(std::string_view bytes, Clock::time_point deadline) {
  while (!bytes.empty()) {
    auto n = send_some(bytes, deadline);
    if (!n) return fail(n.error());
    if (*n == 0) return fail(ErrorCode::kInternal, "agent channel " + ch_->name() + ": the agent stopped reading");
    bytes.remove_prefix(*n);
  }
  return {};
}

Result<void> Stream::send_eof() { return ch_->write_frame(FrameType::kEof, id_, {}); }

void Stream::cancel() { (void)ch_->write_frame(FrameType::kCancel, id_, {}); }

void Stream::grant(uint32_t n) {
  if (n == 0) return;
  {
    std::lock_guard lk(mu_);
    recv_window_ += n;  // before the agent can hear of it
  }
  (void)ch_->write_frame(FrameType::kWindow, id_, protocol::encode_u32(n));
}

Result<void> Stream::send_header(const nlohmann::json& header) {
  return ch_->write_frame(FrameType::kHeader, id_, header.dump());
}

Result<void> Stream::send_end(const nlohmann::json& end) {
  {
    std::lock_guard lk(mu_);
    if (end_sent_ || cancelled_) return {};
    end_sent_ = true;
  }
  return ch_->write_frame(FrameType::kEnd, id_, end.dump());
}

bool Stream::cancelled() {
  std::lock_guard lk(mu_);
  return cancelled_ || closed_.has_value();
}

// ---- AgentChannel ----

namespace {
constexpr std::string_view kProbePayload = "probe";
}  // namespace

AgentChannel::AgentChannel(UniqueFd fd, std::string name, std::function<void(const std::string&)> on_close)
    : fd_(std::move(fd)), wake_(::eventfd(0, EFD_CLOEXEC)), name_(std::move(name)), on_close_(std::move(on_close)) {
  last_heard_ms_ = steady_ms();
}

std::shared_ptr<AgentChannel> AgentChannel::start(UniqueFd fd, std::string name,
                                                  std::function<void(const std::string&)> on_close,
                                                  IncomingHandler incoming, IdleHandler on_idle) {
  std::shared_ptr<AgentChannel> ch(new AgentChannel(std::move(fd), std::move(name), std::move(on_close)));
  ch->incoming_ = std::move(incoming);
  ch->on_idle_ = std::move(on_idle);
  ch->reader_ = std::thread([raw = ch.get()] { raw->reader_loop(); });
  return ch;
}

AgentChannel::~AgentChannel() { shutdown(); }

void AgentChannel::shutdown() {
  // Never shutdown(2) the socket: the shim holds the same socket for the next b3osd.
  stopping_ = true;
  uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
  if (reader_.joinable()) {
    if (reader_.get_id() == std::this_thread::get_id()) {
      reader_.detach();
    } else {
      reader_.join();
    }
  }
}

Result<std::unique_lock<std::timed_mutex>> AgentChannel::quiesce(std::chrono::milliseconds timeout) {
  std::unique_lock lk(write_mu_, std::defer_lock);
  if (!lk.try_lock_for(timeout))
    return fail(channel_error(name_, "a write to the agent did not finish within " +
                                         std::to_string(timeout.count() / 1000) + " s (is it reading?)"));
  return lk;
}

void AgentChannel::break_channel(const std::string& why) {
  {
    std::lock_guard lk(break_mu_);
    if (break_reason_.empty()) break_reason_ = why;
  }
  closed_ = true;
  uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
}

Result<void> AgentChannel::write_frame(FrameType type, uint32_t stream, std::string_view payload,
                                       std::chrono::steady_clock::time_point deadline) {
  return write_bytes(protocol::encode_frame(type, stream, payload), deadline);
}

Result<void> AgentChannel::write_bytes(std::string_view buf, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(write_mu_, std::defer_lock);
  if (!lk.try_lock_until(deadline)) return fail(channel_error(name_, "another write to the agent did not finish in time"));
  if (closed_) return fail(channel_error(name_, "closed"));
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t w = ::send(fd_.get(), buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return fail(errno_error(ErrorCode::kInternal, "agent channel " + name_ + ": write", errno));
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (off == 0) return fail(channel_error(name_, "the agent is not reading (write timed out)"));
      break_channel("a frame to the agent stalled half-written (the agent stopped reading)");
      return fail(channel_error(name_, "the agent stopped reading mid-frame; the channel is broken"));
    }
    pollfd pfd{fd_.get(), POLLOUT, 0};
    (void)::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
  }
  return {};
}

void AgentChannel::reader_loop() {
  char buf[64 * 1024];
  std::string reason = "the agent closed the channel";
  for (;;) {
    pollfd pfds[2] = {{fd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(pfds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      reason = std::string("poll failed: ") + std::strerror(errno);
      break;
    }
    if (pfds[1].revents) {
      std::lock_guard lk(break_mu_);
      reason = break_reason_.empty() ? "closed by b3osd" : break_reason_;
      break;
    }
    ssize_t r = ::read(fd_.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r < 0) reason = std::string("read failed: ") + std::strerror(errno);
      break;
    }
    last_heard_ms_ = steady_ms();
    probe_sent_ms_ = 0;
    std::vector<std::pair<std::shared_ptr<Stream>, Frame>> deliveries;
    std::vector<Frame> controls;
    std::vector<std::shared_ptr<Stream>> opened;
    IncomingHandler handler;
    std::string violation;
    size_t queued_controls = 0;
    {
      std::lock_guard lk(mu_);
      parser_.feed(buf, static_cast<size_t>(r));
      while (auto f = parser_.next()) {
        // JSON from the agent is refused past a depth before anything parses or copies it
        // (copying and freeing nested JSON recurse: 500,000 levels overflow the stack).
        if (carries_json(f->type) && json_depth(f->payload) > kMaxAgentJsonDepth) {
          violation = "the agent sent JSON nested deeper than " + std::to_string(kMaxAgentJsonDepth) + " levels";
          break;
        }
        if (f->stream == 0) {
          // PING, PONG and IDLE are handled as they come; only what waits in control_ counts.
          const bool queued = f->type != FrameType::kPing && f->type != FrameType::kPong && f->type != FrameType::kIdle;
          if (queued && ++queued_controls + control_.size() > kMaxControlFrames) {
            violation = "the agent sent more control frames than b3osd reads";
            break;
          }
          controls.push_back(std::move(*f));
          continue;
        }
        auto it = streams_.find(f->stream);
        if (it == streams_.end() && f->type == FrameType::kOpen && (f->stream & Stream::kAgentStreamBit)) {
          // The agent opens a stream (a relayed HTTP request).
          auto s = std::make_shared<Stream>(shared_from_this(), f->stream);
          streams_[f->stream] = s;
          opened.push_back(s);
          deliveries.emplace_back(std::move(s), std::move(*f));
          handler = incoming_;
          continue;
        }
        if (it == streams_.end()) continue;  // a stream we gave up on
        if (auto s = it->second.lock()) deliveries.emplace_back(std::move(s), std::move(*f));
      }
    }
    if (violation.empty())
      for (auto& c : controls) handle_control(std::move(c));
    for (auto& [s, f] : deliveries) {
      if (!violation.empty()) break;
      if (f.type == FrameType::kWindow) {
        if (auto n = protocol::decode_u32(f.payload)) s->add_credit(*n);
      } else {
        violation = s->deliver(std::move(f));
      }
    }
    if (!violation.empty()) {
      // Its streams still get the agent's OPENs answered below; the channel then closes.
      spdlog::warn("agent channel {}: {}; closing the channel", name_, violation);
      reason = "protocol violation: " + violation;
      for (auto& s : opened) (void)s->send_end({{"ok", false}, {"error", {{"code", "internal"}, {"message", violation}}}});
      break;
    }
    deliveries.clear();
    for (auto& s : opened) {
      if (handler)
        handler(std::move(s));
      else
        (void)s->send_end({{"ok", false}, {"error", {{"code", "product_unavailable"}, {"message", "this b3osd does not relay requests from sandboxes"}}}});
    }
  }
  closed_ = true;
  std::vector<std::shared_ptr<Stream>> live;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, w] : streams_)
      if (auto s = w.lock()) live.push_back(std::move(s));
    control_cv_.notify_all();
  }
  for (auto& s : live) s->close(reason);
  // on_close may drop the last outside reference (the sandbox it ends owned this channel):
  // hold one until the call is over, so the channel is destroyed after its last use, here.
  std::shared_ptr<AgentChannel> keep = weak_from_this().lock();
  if (!stopping_ && on_close_) on_close_(reason);
}

void AgentChannel::handle_control(Frame f) {
  if (f.type == FrameType::kPong && f.payload == kProbePayload) return;  // heard: enough
  if (f.type == FrameType::kPing) {
    // On the reader thread: never wait long for a writer (the PONG is dropped instead).
    (void)write_frame(FrameType::kPong, 0, f.payload, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    return;
  }
  if (f.type == FrameType::kIdle) {
    auto j = nlohmann::json::parse(f.payload, nullptr, false);
    if (on_idle_ && j.is_object() && j.contains("idle") && j["idle"].is_boolean()) {
      const auto held = j.find("held");  // an agent older than background processes says none
      on_idle_(j["idle"].get<bool>(), held != j.end() && held->is_boolean() && held->get<bool>());
    }
    return;
  }
  std::lock_guard lk(mu_);
  if (f.type == FrameType::kResyncAck) {
    if (!resync_nonce_ || f.payload != *resync_nonce_) return;  // a stale answer
    resync_nonce_.reset();
  }
  control_.push_back(std::move(f));
  control_cv_.notify_all();
}

Result<Frame> AgentChannel::wait_control(FrameType type, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::unique_lock lk(mu_);
  for (;;) {
    for (auto it = control_.begin(); it != control_.end(); ++it) {
      if (it->type == type) {
        Frame f = std::move(*it);
        control_.erase(it);
        return f;
      }
    }
    if (closed_) return fail(channel_error(name_, "closed while waiting for the agent"));
    if (control_cv_.wait_until(lk, deadline) == std::cv_status::timeout) {
      return fail(channel_error(name_, "the agent did not answer within " + std::to_string(timeout.count()) + " ms"));
    }
  }
}

Result<nlohmann::json> AgentChannel::wait_hello(std::chrono::milliseconds timeout) {
  auto f = wait_control(FrameType::kHello, timeout);
  if (!f) return fail(f.error());
  try {
    return nlohmann::json::parse(f->payload);
  } catch (const std::exception&) {
    return fail(channel_error(name_, "unreadable HELLO"));
  }
}

Result<void> AgentChannel::resync(std::chrono::milliseconds timeout, bool cut_frame) {
  std::string nonce = random_bytes(16);
  {
    std::lock_guard lk(mu_);
    resync_nonce_ = nonce;
    parser_.force_resync();
    control_.clear();
  }
  auto deadline = Clock::now() + timeout;
  bool filled = !cut_frame;
  while (Clock::now() < deadline) {
    if (auto r = write_frame(FrameType::kResync, 0, nonce); !r) return r;
    auto f = wait_control(FrameType::kResyncAck, std::chrono::milliseconds(200));
    if (f) return {};
    if (closed_) return fail(f.error());
    if (!filled) {
      // No answer: the dead daemon may have cut a frame off, and the agent is still waiting
      // for up to kMaxPayload bytes of its payload, reading our RESYNCs as those bytes (a 1 MiB
      // DATA frame cut early took hours of them). Zeros are never a frame's first byte: they
      // complete the cut frame (a stream's bytes, dropped with its stream by the RESYNC), and
      // the agent discards the rest looking for a header. Given time of its own.
      filled = true;
      static const std::string filler(protocol::kHeaderSize + protocol::kMaxPayload, '\0');
      const auto t0 = Clock::now();
      if (auto r = write_bytes(filler, t0 + std::chrono::seconds(5)); !r) return r;
      deadline += Clock::now() - t0;
    }
  }
  return fail(channel_error(name_, "no RESYNC_ACK from the agent"));
}

Result<void> AgentChannel::send_identity(const nlohmann::json& identity, std::chrono::milliseconds timeout,
                                         Result<bool>* idle_reports) {
  const auto deadline = Clock::now() + timeout;
  if (auto r = write_frame(FrameType::kIdentity, 0, identity.dump()); !r) return r;
  Result<std::shared_ptr<Stream>> idle = fail(ErrorCode::kInternal, "not asked");
  if (idle_reports) idle = open({{"op", "idle_reports"}});
  auto f = wait_control(FrameType::kIdentityAck, timeout);
  if (!f) return fail(f.error());
  auto j = nlohmann::json::parse(f->payload, nullptr, false);
  if (j.is_discarded() || !j.value("ok", false)) {
    return fail(channel_error(name_, "the agent refused its identity: " + f->payload));
  }
  if (idle_reports) *idle_reports = idle ? idle_answer(**idle, deadline) : fail(idle.error());
  return {};
}

Result<bool> AgentChannel::idle_answer(Stream& s, Clock::time_point deadline) {
  for (;;) {
    auto f = s.next(deadline);
    if (!f) return fail(f.error());
    if (f->type != FrameType::kEnd) continue;
    auto j = nlohmann::json::parse(f->payload, nullptr, false);
    // An agent that does not know the op answers {"ok":false} (unknown op).
    return j.is_object() && j.value("ok", false);
  }
}

std::chrono::milliseconds AgentChannel::probe(std::chrono::milliseconds quiet) {
  const int64_t now = steady_ms();
  if (const int64_t sent = probe_sent_ms_.load(); sent != 0) return std::chrono::milliseconds(now - sent);
  if (now - last_heard_ms_.load() < quiet.count()) return std::chrono::milliseconds(0);
  // Marked out before the write: the answer may be read before the write call returns.
  probe_sent_ms_ = now;
  if (!write_frame(FrameType::kPing, 0, kProbePayload, std::chrono::steady_clock::now() + std::chrono::milliseconds(50))) {
    int64_t mine = now;
    probe_sent_ms_.compare_exchange_strong(mine, 0);  // not sent: not out
  }
  return std::chrono::milliseconds(0);
}

void AgentChannel::reset_probe() {
  probe_sent_ms_ = 0;
  last_heard_ms_ = steady_ms();
}

Result<bool> AgentChannel::request_idle_reports(std::chrono::milliseconds timeout) {
  auto s = open({{"op", "idle_reports"}});
  if (!s) return fail(s.error());
  return idle_answer(**s, Clock::now() + timeout);
}

Result<double> AgentChannel::ping(std::chrono::milliseconds timeout) {
  auto t0 = Clock::now();
  if (auto r = write_frame(FrameType::kPing, 0, "p"); !r) return fail(r.error());
  auto f = wait_control(FrameType::kPong, timeout);
  if (!f) return fail(f.error());
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Result<std::shared_ptr<Stream>> AgentChannel::open(const nlohmann::json& request) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard lk(mu_);
    if (closed_) return fail(channel_error(name_, "closed"));
    s = std::make_shared<Stream>(shared_from_this(), next_id_++);
    streams_[s->id()] = s;
  }
  if (auto r = write_frame(FrameType::kOpen, s->id(), request.dump()); !r) return fail(r.error());
  return s;
}

void AgentChannel::forget(uint32_t id) {
  std::lock_guard lk(mu_);
  streams_.erase(id);
}

}  // namespace b3os::agentlink
