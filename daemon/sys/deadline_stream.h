#pragma once
// DeadlineStream: bounded-time socket I/O for Beast's synchronous reads and writes.

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <functional>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>

namespace b3os::sys {

/// A socket as Beast's SyncReadStream/SyncWriteStream whose every read and write waits at
/// most until a deadline, and gives up as soon as `cancelled` says so. Each recv/send is
/// non-blocking (MSG_DONTWAIT, whatever the socket's mode); waiting is poll() in slices of
/// 100 ms. (Asio's own sync operations on a blocking socket wait without limit, whatever
/// SO_RCVTIMEO/SO_SNDTIMEO say.)
class DeadlineStream {
 public:
  DeadlineStream(int fd, boost::asio::any_io_executor ex) : fd_(fd), ex_(std::move(ex)) {}
  using executor_type = boost::asio::any_io_executor;
  executor_type get_executor() { return ex_; }

  void arm(std::chrono::steady_clock::time_point deadline, const std::function<bool()>* cancelled) {
    deadline_ = deadline;
    cancelled_ = cancelled;
  }
  bool timed_out() const { return timed_out_; }
  bool was_cancelled() const { return was_cancelled_; }

  template <class Buffers>
  size_t read_some(const Buffers& buffers, boost::beast::error_code& ec) {
    auto b = *boost::asio::buffer_sequence_begin(buffers);
    return io(POLLIN, [&] { return ::recv(fd_, b.data(), b.size(), MSG_DONTWAIT); }, ec, true);
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    boost::beast::error_code ec;
    size_t n = read_some(buffers, ec);
    if (ec) throw boost::beast::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers, boost::beast::error_code& ec) {
    auto b = *boost::asio::buffer_sequence_begin(buffers);
    return io(POLLOUT, [&] { return ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL | MSG_DONTWAIT); }, ec, false);
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    boost::beast::error_code ec;
    size_t n = write_some(buffers, ec);
    if (ec) throw boost::beast::system_error(ec);
    return n;
  }

 private:
  template <class Op>
  size_t io(short events, Op op, boost::beast::error_code& ec, bool reading) {
    ec = {};
    for (;;) {
      ssize_t n = op();
      if (n > 0) return static_cast<size_t>(n);
      if (n == 0 && reading) {
        ec = boost::asio::error::eof;
        return 0;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        ec = boost::beast::error_code(errno, boost::system::system_category());
        return 0;
      }
      if (cancelled_ && *cancelled_ && (*cancelled_)()) {
        was_cancelled_ = true;
        ec = boost::asio::error::operation_aborted;
        return 0;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        ec = boost::asio::error::timed_out;
        return 0;
      }
      pollfd p{fd_, events, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    }
  }

  int fd_;
  boost::asio::any_io_executor ex_;
  std::chrono::steady_clock::time_point deadline_{};
  const std::function<bool()>* cancelled_ = nullptr;
  bool timed_out_ = false, was_cancelled_ = false;
};

}  // namespace b3os::sys
