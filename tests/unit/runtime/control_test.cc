// The urpc client of daemon/runtime/control.h against a scripted server on a unix socket.

#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstring>
#include <fstream>
#include <filesystem>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/unique_fd.h"
#include "daemon/runtime/control.h"
#include "daemon/runtime/runsc.h"
#include "common/fd_passing.h"

namespace b3os::runtime {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

TEST(JsonObjectLength, FindsTheEndOfTheFirstObject) {
  EXPECT_EQ(json_object_length(""), 0);
  EXPECT_EQ(json_object_length("  "), 0);
  EXPECT_EQ(json_object_length("{\"a\":1"), 0);
  EXPECT_EQ(json_object_length("{\"a\":1}"), 7);
  EXPECT_EQ(json_object_length(" {}xyz"), 3);
  // Braces and quotes inside strings do not count.
  EXPECT_EQ(json_object_length(R"({"err":"a } \" { ]","r":[{}]})"), 29);
  EXPECT_EQ(json_object_length(R"({"err":"a \\"})"), 14);
  EXPECT_EQ(json_object_length(R"({"err":"a \\)"), 0);
  EXPECT_EQ(json_object_length("[1]"), -1);
  EXPECT_EQ(json_object_length("x{}"), -1);
}

TEST(ControlProtocol, LoopbackArgumentIsWhatRunscSends) {
  // Captured with strace from `runsc --network none restore` (runsc 0.0~20240729.0); the server
  // decodes it with Go's encoding/json, so the key order does not matter, the values do.
  const json runsc = json::parse(R"({"LoopbackLinks":[{"Name":"lo","Addresses":[{"Address":"127.0.0.1","PrefixLen":8},)"
                                 R"({"Address":"::1","PrefixLen":128}],"Routes":[{"Destination":{"IP":"127.0.0.0",)"
                                 R"("Mask":"/wAAAA=="},"Gateway":""},{"Destination":{"IP":"::1","Mask":)"
                                 R"("/////////////////////w=="},"Gateway":""}],"GVisorGRO":false}],"FDBasedLinks":null,)"
                                 R"("XDPLinks":null,"Defaultv4Gateway":{"Route":{"Destination":{"IP":"","Mask":null},)"
                                 R"("Gateway":""},"Name":""},"Defaultv6Gateway":{"Route":{"Destination":{"IP":"",)"
                                 R"("Mask":null},"Gateway":""},"Name":""},"PCAP":false,"LogPackets":false,)"
                                 R"("NATBlob":false,"DisconnectOk":false})");
  EXPECT_EQ(loopback_links_arg(), runsc);
}

TEST(ControlProtocol, OnlyKnownVersionsAreSpokenTo) {
  EXPECT_TRUE(control_protocol_known("0.0~20240729.0"));
  EXPECT_TRUE(control_protocol_known("release-20240729.0"));
  EXPECT_FALSE(control_protocol_known("release-20250101.0"));
  EXPECT_FALSE(control_protocol_known(""));
}

// A one-connection server: accepts, reads one request with its fds, hands both to `answer`,
// writes back what `answer` returns in `pieces` writes.
class ScriptedServer {
 public:
  using Answer = std::function<std::string(const json& request, const std::vector<int>& fds)>;
  ScriptedServer(Answer answer, int pieces = 1) {
    dir_ = fs::temp_directory_path() / ("b3os-ctl-" + random_base32(8));
    fs::create_directories(dir_);
    path_ = (dir_ / "control.sock").string();
    listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    EXPECT_EQ(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_.get(), 4), 0);
    thread_ = std::thread([this, answer = std::move(answer), pieces] {
      // Accepts connections one after another; answers each request on them in turn.
      for (;;) {
        UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn) return;
        std::string buf;
        std::vector<int> fds;
        for (;;) {
          long len = json_object_length(buf);
          if (len == 0) {
            char data[4096];
            iovec iov{data, sizeof(data)};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
            msghdr msg{};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control;
            msg.msg_controllen = sizeof(control);
            ssize_t n = ::recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC);
            if (n <= 0) break;  // the client is done with this connection
            for (auto& fd : received_fds(msg)) fds.push_back(fd.release());
            buf.append(data, n);
            continue;
          }
          std::string reply = answer(json::parse(buf.substr(0, len)), fds);
          buf.erase(0, len);
          for (int fd : fds) ::close(fd);
          fds.clear();
          // "HANGUP:" + bytes: write the bytes, then close the connection.
          const bool hang_up = reply.rfind("HANGUP:", 0) == 0;
          if (hang_up) reply.erase(0, 7);
          const size_t step = std::max<size_t>(1, reply.size() / pieces);
          for (size_t off = 0; off < reply.size(); off += step) {
            (void)::write(conn.get(), reply.data() + off, std::min(step, reply.size() - off));
            std::this_thread::sleep_for(2ms);
          }
          if (hang_up) break;
        }
      }
    });
  }
  ~ScriptedServer() {
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
    fs::remove_all(dir_);
  }
  const std::string& path() const { return path_; }

 private:
  fs::path dir_;
  std::string path_;
  UniqueFd listener_;
  std::thread thread_;
};

TEST(ControlConnection, SendsMethodArgAndFilesAndReadsAReplyInPieces) {
  std::string seen_method, seen_file;
  ScriptedServer server(
      [&](const json& req, const std::vector<int>& fds) {
        seen_method = req["method"];
        EXPECT_EQ(req["arg"]["HavePagesFile"], true);
        EXPECT_EQ(fds.size(), 1u);
        if (!fds.empty()) {
          char b[16] = {};
          EXPECT_EQ(::pread(fds[0], b, sizeof(b), 0), 5);
          seen_file = b;
        }
        return std::string(R"({"success":true,"err":"","result":{"x":"a } b"}})");
      },
      /*pieces=*/5);
  auto file = fs::temp_directory_path() / ("b3os-ctl-file-" + random_base32(6));
  { std::ofstream(file) << "image"; }
  UniqueFd f(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  auto conn = ControlConnection::connect(server.path());
  ASSERT_TRUE(conn) << conn.error().message;
  const int fds[] = {f.get()};
  auto r = conn->call("containerManager.Restore", json{{"HavePagesFile", true}}, fds, 5s);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["x"], "a } b");
  EXPECT_EQ(seen_method, "containerManager.Restore");
  EXPECT_EQ(seen_file, "image");
  fs::remove(file);
}

TEST(ControlConnection, ARefusedCallCarriesTheServersReason) {
  ScriptedServer server([](const json&, const std::vector<int>&) {
    return std::string(R"({"success":false,"err":"checkpointing: no space left on device","result":null})");
  });
  auto conn = ControlConnection::connect(server.path());
  ASSERT_TRUE(conn);
  auto r = conn->call("containerManager.Checkpoint", json::object(), {}, 5s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no space left on device"), std::string::npos) << r.error().message;
}

TEST(ControlConnection, ASilentServerTimesOut) {
  ScriptedServer server([](const json&, const std::vector<int>&) {
    std::this_thread::sleep_for(600ms);
    return std::string();
  });
  auto conn = ControlConnection::connect(server.path());
  ASSERT_TRUE(conn);
  auto t0 = std::chrono::steady_clock::now();
  auto r = conn->call("containerManager.StartRoot", "sbx", {}, 200ms);
  ASSERT_FALSE(r);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  EXPECT_NE(r.error().message.find("no answer"), std::string::npos) << r.error().message;
}

TEST(ControlConnection, AServerThatHangsUpMidReplyIsAnError) {
  ScriptedServer server([](const json&, const std::vector<int>&) { return std::string(R"(HANGUP:{"success":tr)"); });
  auto conn = ControlConnection::connect(server.path());
  ASSERT_TRUE(conn);
  auto r = conn->call("x", json::object(), {}, 5s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("closed the connection"), std::string::npos) << r.error().message;
}

TEST(ControlConnection, NoSocketNoConnection) {
  auto conn = ControlConnection::connect("/nonexistent/b3os/control.sock");
  ASSERT_FALSE(conn);
  EXPECT_NE(conn.error().message.find("/nonexistent/b3os/control.sock"), std::string::npos);
}

// Runsc's direct start against a fake runsc root: a state file and lock as runsc leaves them
// after `runsc create`, whose control socket is a scripted server.
class DirectStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("b3os-root-" + random_base32(8));
    fs::create_directories(root_);
    cfg_.root_dir = root_.string();
    cfg_.control = "direct";
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string state_file() const { return (root_ / "sbx_a_sandbox:sbx_a.state").string(); }
  std::string lock_file() const { return (root_ / "sbx_a_sandbox:sbx_a.lock").string(); }
  void write_state(const std::string& status, const std::string& socket) {
    std::ofstream(lock_file()).flush();
    std::ofstream(state_file()) << R"({"id":"sbx_a","spec":{"ociVersion":"1.0.2"},"status":")" << status
                                << R"(","goferPid":11,"sandbox":{"id":"sbx_a","pid":12,"controlSocketPath":")"
                                << socket << R"(","cgroup":{"cgroupv1":{"name":"/b3os/sbx_a"}}},"saver":{"rootDir":"x"}})";
  }
  std::string read_state_text() const {
    std::ifstream f(state_file());
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  fs::path root_;
  RuntimeConfig cfg_;
};

TEST_F(DirectStartTest, SetsUpLoopbackStartsAndRecordsRunningLikeRunsc) {
  std::vector<std::string> methods;
  json start_arg;
  ScriptedServer server([&](const json& req, const std::vector<int>&) {
    methods.push_back(req["method"]);
    if (req["method"] == "containerManager.StartRoot") start_arg = req["arg"];
    return std::string(R"({"success":true,"err":"","result":{}})");
  });
  write_state("created", server.path());
  Runsc runsc(cfg_);
  ASSERT_TRUE(runsc.direct_control());
  auto r = runsc.start("sbx_a");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(methods, (std::vector<std::string>{"Network.CreateLinksAndRoutes", "containerManager.StartRoot"}));
  EXPECT_EQ(start_arg, "sbx_a");
  // Only the status changed, keys where runsc put them; no temporary left; the lock is free.
  const std::string text = read_state_text();
  const std::string want = R"({"id":"sbx_a","spec":{"ociVersion":"1.0.2"},"status":"running","goferPid":11,)"
                           R"("sandbox":{"id":"sbx_a","pid":12,"controlSocketPath":")" + server.path() +
                           R"(","cgroup":{"cgroupv1":{"name":"/b3os/sbx_a"}}},"saver":{"rootDir":"x"}})";
  EXPECT_EQ(text, want);
  EXPECT_FALSE(fs::exists(state_file() + ".b3os-tmp"));
  UniqueFd lock(::open(lock_file().c_str(), O_RDWR | O_CLOEXEC));
  EXPECT_EQ(::flock(lock.get(), LOCK_EX | LOCK_NB), 0) << "lock still held";
}

TEST_F(DirectStartTest, ARefusedStartLeavesTheStateAloneAndTheLockFree) {
  ScriptedServer server([&](const json& req, const std::vector<int>&) {
    if (req["method"] == "containerManager.StartRoot")
      return std::string(R"({"success":false,"err":"starting root container: boom","result":null})");
    return std::string(R"({"success":true,"err":"","result":{}})");
  });
  write_state("created", server.path());
  const std::string before = read_state_text();
  Runsc runsc(cfg_);
  auto r = runsc.start("sbx_a");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("boom"), std::string::npos) << r.error().message;
  EXPECT_EQ(read_state_text(), before);
  EXPECT_FALSE(fs::exists(state_file() + ".b3os-tmp"));
  UniqueFd lock(::open(lock_file().c_str(), O_RDWR | O_CLOEXEC));
  EXPECT_EQ(::flock(lock.get(), LOCK_EX | LOCK_NB), 0) << "lock still held";
}

TEST_F(DirectStartTest, OnlyACreatedContainerIsStartedAndBadStateIsAnError) {
  int calls = 0;
  ScriptedServer server([&](const json&, const std::vector<int>&) {
    ++calls;
    return std::string(R"({"success":true,"err":"","result":{}})");
  });
  Runsc runsc(cfg_);
  write_state("running", server.path());
  auto r = runsc.start("sbx_a");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("running, not created"), std::string::npos) << r.error().message;
  std::ofstream(state_file()) << R"({"status":7,"sandbox":{}})";
  r = runsc.start("sbx_a");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("unreadable runsc state"), std::string::npos) << r.error().message;
  r = runsc.start("sbx_missing");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no container"), std::string::npos) << r.error().message;
  EXPECT_EQ(calls, 0);
}

TEST_F(DirectStartTest, WaitsForRunscsLock) {
  ScriptedServer server([&](const json&, const std::vector<int>&) {
    return std::string(R"({"success":true,"err":"","result":{}})");
  });
  write_state("created", server.path());
  UniqueFd held(::open(lock_file().c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_EQ(::flock(held.get(), LOCK_EX), 0);
  std::thread release([&] {
    std::this_thread::sleep_for(200ms);
    ::flock(held.get(), LOCK_UN);
  });
  auto t0 = std::chrono::steady_clock::now();
  Runsc runsc(cfg_);
  auto r = runsc.start("sbx_a");
  release.join();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 190ms);
  EXPECT_NE(read_state_text().find(R"("status":"running")"), std::string::npos);
}

TEST_F(DirectStartTest, CheckpointSendsThreeNewImageFilesAndRefusesAnExistingImage) {
  std::vector<int> nfds;
  json arg;
  ScriptedServer server([&](const json& req, const std::vector<int>& fds) {
    nfds.push_back(static_cast<int>(fds.size()));
    arg = req["arg"];
    for (int fd : fds) EXPECT_EQ(::write(fd, "x", 1), 1);
    return std::string(R"({"success":true,"err":"","result":{}})");
  });
  write_state("running", server.path());
  Runsc runsc(cfg_);
  const std::string image = (root_ / "img" / "deep").string();
  auto r = runsc.checkpoint("sbx_a", image);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(nfds, std::vector<int>{3});
  EXPECT_EQ(arg["Resume"], true);
  EXPECT_EQ(arg["metadata"]["compression"], "none");
  for (const char* f : {"checkpoint.img", "pages_meta.img", "pages.img"}) EXPECT_EQ(fs::file_size(image + "/" + f), 1u) << f;
  // An image is never written over.
  auto again = runsc.checkpoint("sbx_a", image);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("checkpoint.img"), std::string::npos) << again.error().message;
  EXPECT_EQ(nfds.size(), 1u);
}

TEST(RunscControl, KvmAndCliStayOnTheCli) {
  RuntimeConfig kvm;
  kvm.control = "direct";
  kvm.platform = "kvm";
  kvm.root_dir = "/nonexistent";
  EXPECT_FALSE(Runsc(kvm).direct_control());
  RuntimeConfig cli;
  cli.control = "cli";
  cli.root_dir = "/nonexistent";
  EXPECT_FALSE(Runsc(cli).direct_control());
}

}  // namespace
}  // namespace b3os::runtime
