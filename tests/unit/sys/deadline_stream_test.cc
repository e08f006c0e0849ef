#include "daemon/sys/deadline_stream.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <string>

namespace b3os::sys {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  int fd[2];
  Pair() { ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd); }
  ~Pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

TEST(DeadlineStream, WriteToAPeerThatStopsReadingGivesUpAtTheDeadline) {
  boost::asio::io_context io;
  Pair p;  // a blocking socket: the stream must not block on it
  DeadlineStream s(p.fd[0], io.get_executor());
  s.arm(Clock::now() + std::chrono::milliseconds(300), nullptr);
  std::string big(8 << 20, 'x');
  auto t0 = Clock::now();
  boost::beast::error_code ec;
  size_t total = 0;
  while (!ec && total < big.size()) total += s.write_some(boost::asio::buffer(big.data() + total, big.size() - total), ec);
  EXPECT_EQ(ec, boost::asio::error::timed_out);
  EXPECT_TRUE(s.timed_out());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  EXPECT_GT(total, 0u);
}

TEST(DeadlineStream, ReadReturnsDataEofOrCancellation) {
  boost::asio::io_context io;
  Pair p;
  DeadlineStream s(p.fd[0], io.get_executor());
  s.arm(Clock::now() + std::chrono::seconds(5), nullptr);
  ASSERT_EQ(::write(p.fd[1], "hi", 2), 2);
  char buf[16];
  boost::beast::error_code ec;
  EXPECT_EQ(s.read_some(boost::asio::buffer(buf), ec), 2u);
  EXPECT_FALSE(ec);
  bool gone = false;
  std::function<bool()> cancelled = [&] { return gone = true; };
  s.arm(Clock::now() + std::chrono::seconds(5), &cancelled);
  auto t0 = Clock::now();
  EXPECT_EQ(s.read_some(boost::asio::buffer(buf), ec), 0u);
  EXPECT_EQ(ec, boost::asio::error::operation_aborted);
  EXPECT_TRUE(s.was_cancelled());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  ::shutdown(p.fd[1], SHUT_WR);
  s.arm(Clock::now() + std::chrono::seconds(5), nullptr);
  EXPECT_EQ(s.read_some(boost::asio::buffer(buf), ec), 0u);
  EXPECT_EQ(ec, boost::asio::error::eof);
}

}  // namespace
}  // namespace b3os::sys
