// The gateway against a scripted upstream (a TEST FIXTURE: a socket that answers what each
// test tells it), and the budgets under racing calls.
#include "daemon/gateway/gateway.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/ids.h"
#include "daemon/gateway/upstream.h"

namespace b3os::gateway {
namespace {

using nlohmann::json;

/// Listens on 127.0.0.1; each connection's request is recorded and `answer` writes the reply.
class ScriptedUpstream {
 public:
  explicit ScriptedUpstream(std::function<void(int fd, const std::string& body)> answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~ScriptedUpstream() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (auto& t : workers_) t.join();
  }
  int port() const { return port_; }
  int calls() const { return calls_; }
  std::string last_request() {
    std::lock_guard lk(mu_);
    return last_;
  }

 private:
  void loop() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      workers_.emplace_back([this, c] {
        std::string req;
        char buf[65536];
        size_t need = std::string::npos;
        while (need == std::string::npos || req.size() < need) {
          ssize_t n = ::read(c, buf, sizeof buf);
          if (n <= 0) break;
          req.append(buf, n);
          size_t h = req.find("\r\n\r\n");
          if (h != std::string::npos && need == std::string::npos) {
            size_t cl = req.find("Content-Length: ");
            need = h + 4 + (cl == std::string::npos ? 0 : std::stoul(req.substr(cl + 16)));
          }
        }
        {
          std::lock_guard lk(mu_);
          last_ = req;
        }
        ++calls_;
        size_t h = req.find("\r\n\r\n");
        answer_(c, h == std::string::npos ? "" : req.substr(h + 4));
        ::close(c);
      });
    }
  }
  std::function<void(int, const std::string&)> answer_;
  int fd_ = -1, port_ = 0;
  std::atomic<int> calls_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::string last_;
};

void write_all(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }

std::string http_json(int status, const json& body) {
  std::string b = body.dump();
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(b.size()) + "\r\nConnection: close\r\n\r\n" + b;
}

/// Collects what the gateway answers.
struct CollectSink : Sink {
  int status = 0;
  std::string content_type, body;
  bool streamed = false, ended = false, ended_ok = false, leave = false;
  Result<void> respond(int s, const std::string& ct, const std::string& b) override {
    status = s;
    content_type = ct;
    body = b;
    return {};
  }
  Result<void> begin_stream(int s, const std::string& ct) override {
    status = s;
    content_type = ct;
    streamed = true;
    return {};
  }
  Result<void> write(std::string_view b) override {
    body += b;
    if (leave) return fail(ErrorCode::kInternal, "client went away");
    return {};
  }
  void end(bool ok) override {
    ended = true;
    ended_ok = ok;
  }
  bool gone() override { return leave && !body.empty(); }
  json error() const { return json::parse(body).at("error"); }
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("b3os-gw-" + random_base32(8));
    std::filesystem::create_directories(dir_);
    store_ = std::move(*store::Store::open((dir_ / "b3os.db").string()));
    budgets_ = std::make_unique<Budgets>(*store_);
  }
  void TearDown() override {
    budgets_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  /// A gateway with one model on `port`: $1 per million input and $2 per million output tokens.
  std::unique_ptr<Gateway> gateway(int port, const std::string& extra = "") {
    auto m = parse_model_flag("b3os/test=http://127.0.0.1:" + std::to_string(port) +
                              "/v1,upstream=up-model,in=1,out=2,max-output=1000" + extra);
    EXPECT_TRUE(m) << m.error().message;
    return std::make_unique<Gateway>(std::vector<ModelConfig>{*m}, *budgets_);
  }
  /// A sandbox's caller with a budget of its own; `cap` in micro-dollars.
  Caller caller(std::optional<Micros> cap) {
    std::string id = "grt_" + random_base32(8);
    EXPECT_TRUE(store_->ensure_budget(id, "prj_x", cap));
    return Caller{id, "prj_x", "sbx_x", "", true};
  }
  Micros spent(const Caller& c) { return (*store_->get_budget(c.budget_id))->spent_micros; }

  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Budgets> budgets_;
};

const std::string kHello = R"({"model":"b3os/test","messages":[{"role":"user","content":"hi"}],"max_tokens":100})";

TEST(ModelFlags, ParsesEverySetting) {
  auto m = parse_model_flag("b3os/q=http://10.0.0.5:8080/v1/,upstream=qwen,in=0.05,out=0.4,key-env=K,max-output=512,timeout=9,default");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->host, "10.0.0.5");
  EXPECT_EQ(m->port, "8080");
  EXPECT_EQ(m->path_prefix, "/v1");
  EXPECT_EQ(m->upstream_model, "qwen");
  EXPECT_EQ(m->micros_per_m_input, 50'000);
  EXPECT_EQ(m->micros_per_m_output, 400'000);
  EXPECT_EQ(m->max_output_tokens, 512);
  EXPECT_EQ(m->timeout_s, 9);
  EXPECT_TRUE(m->is_default);
}

TEST(ModelFlags, RefusesWhatItCannotServe) {
  EXPECT_FALSE(parse_model_flag("m=https://api.example/v1"));
  EXPECT_FALSE(parse_model_flag("m=ftp://x"));
  EXPECT_FALSE(parse_model_flag("m=http://h:80/v1,in=-1"));
  EXPECT_FALSE(parse_model_flag("m=http://h:80/v1,colour=blue"));
  EXPECT_FALSE(parse_model_flag("no-equals-sign"));
  EXPECT_FALSE(parse_model_flag("bad id=http://h/v1"));
  auto a = parse_model_flag("a=http://h/v1"), b = parse_model_flag("a=http://h/v1");
  EXPECT_FALSE(finalize_models({*a, *b}));
  auto ok = finalize_models({*a});
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->front().is_default);
}

TEST(Pricing, CallsCostTheirTokensRoundedUpToTheMicroDollar) {
  auto m = parse_model_flag("m=http://h/v1,in=0.05,out=0.4");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->cost(0, 0), 0);
  EXPECT_EQ(m->cost(1, 0), 1) << "0.05 micro-dollars is charged as 1: never less than the tokens cost";
  EXPECT_EQ(m->cost(20, 0), 1) << "exactly 1";
  EXPECT_EQ(m->cost(21, 0), 2);
  EXPECT_EQ(m->cost(20, 5), 3) << "1 + 2 micro-dollars, rounded once per call";
  EXPECT_EQ(m->cost(1'000'000, 1'000'000), 450'000);
  EXPECT_EQ(m->cost(-5, 0), 0) << "no usage is negative";
  // The worst case of the largest bounds at the highest price neither overflows nor wraps.
  auto dear = parse_model_flag("m=http://h/v1,in=1000000,out=1000000");
  ASSERT_TRUE(dear);
  EXPECT_EQ(dear->micros_per_m_output, 1'000'000'000'000);
  EXPECT_EQ(dear->cost(16 << 20, (1 << 22) * 16), (int64_t{16 << 20} + int64_t{1 << 22} * 16) * 1'000'000);
  EXPECT_EQ(dear->cost(INT64_MAX, INT64_MAX), INT64_MAX) << "an absurd usage saturates";
}

TEST_F(GatewayTest, ACapIsReachedExactlyAndNeverPassed) {
  // Ten calls of 0.1 USD fill a cap of 1 USD exactly (in doubles 0.1 added ten times is not 1).
  auto c = caller(usd_to_micros(1.0));
  for (int i = 0; i < 10; ++i) {
    auto r = budgets_->reserve(c.budget_id, usd_to_micros(0.1));
    ASSERT_TRUE(r) << i << ": " << r.error().message;
    store::LedgerRow row;
    row.project_id = "prj_x";
    row.model = "m";
    row.cost_micros = r->amount;
    budgets_->settle(*r, row);
  }
  EXPECT_EQ(spent(c), 1'000'000);
  auto one_more = budgets_->reserve(c.budget_id, 1);
  ASSERT_FALSE(one_more);
  EXPECT_EQ(one_more.error().code, ErrorCode::kPaymentRequired);
  EXPECT_NE(one_more.error().message.find("spend cap $1.00 reached: $1.00 spent"), std::string::npos)
      << one_more.error().message;
  EXPECT_NE(one_more.error().message.find("$0.000001"), std::string::npos) << one_more.error().message;
}

TEST_F(GatewayTest, NonStreamedCallIsPricedFromUsageAndShapedForTheCaller) {
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, http_json(200, {{"id", "c1"}, {"object", "chat.completion"}, {"model", "up-model"},
                                  {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "hello"}}}}}},
                                  {"usage", {{"prompt_tokens", 20}, {"completion_tokens", 50}, {"total_tokens", 70}}}}));
  });
  auto gw = gateway(up.port());
  auto c = caller(1'000'000);
  CollectSink sink;
  gw->handle(c, "POST", "/chat/completions", kHello, sink);
  ASSERT_EQ(sink.status, 200) << sink.body;
  json j = json::parse(sink.body);
  EXPECT_EQ(j["model"], "b3os/test");
  EXPECT_EQ(j["usage"]["completion_tokens"], 50);
  EXPECT_EQ(spent(c), 20 * 1 + 50 * 2) << "$1 and $2 per million tokens: 1 and 2 micro-dollars a token";
  json sent = json::parse(up.last_request().substr(up.last_request().find("\r\n\r\n") + 4));
  EXPECT_EQ(sent["model"], "up-model");
  EXPECT_EQ(sent["max_tokens"], 100);
  EXPECT_FALSE(sent.contains("stream_options"));
  auto rows = store_->ledger(c.budget_id, 10);
  ASSERT_TRUE(rows && rows->size() == 1);
  EXPECT_EQ((*rows)[0].outcome, "completed");
  EXPECT_EQ((*rows)[0].sandbox_id, "sbx_x");
}

TEST_F(GatewayTest, StreamIsRelayedEventByEventAndUsageAskedForOnlyUpstream) {
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
    write_all(fd, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"model\":\"up-model\"}\n\n");
    write_all(fd, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"model\":\"up-model\"}\n\n");
    write_all(fd, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
  });
  auto gw = gateway(up.port());
  auto c = caller(1'000'000);
  CollectSink sink;
  gw->handle(c, "POST", "/chat/completions",
             R"({"model":"b3os/test","stream":true,"messages":[{"role":"user","content":"hi"}]})", sink);
  EXPECT_TRUE(sink.streamed && sink.ended && sink.ended_ok);
  EXPECT_EQ(sink.content_type, "text/event-stream");
  EXPECT_NE(sink.body.find("\"model\":\"b3os/test\""), std::string::npos) << sink.body;
  EXPECT_EQ(sink.body.find("usage"), std::string::npos) << "the client did not ask for usage: " << sink.body;
  EXPECT_NE(sink.body.find("data: [DONE]\n\n"), std::string::npos);
  json sent = json::parse(up.last_request().substr(up.last_request().find("\r\n\r\n") + 4));
  EXPECT_EQ(sent["stream_options"]["include_usage"], true);
  EXPECT_EQ(sent["max_tokens"], 1000) << "the model's limit is always sent, so the reservation is a real bound";
  EXPECT_EQ(spent(c), 10 * 1 + 2 * 2);
}

TEST_F(GatewayTest, BrokenStreamWithoutUsageIsChargedTheReservation) {
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
    write_all(fd, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
  });
  auto gw = gateway(up.port());
  auto c = caller(1'000'000);
  CollectSink sink;
  gw->handle(c, "POST", "/chat/completions",
             R"({"model":"b3os/test","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]})", sink);
  EXPECT_TRUE(sink.ended);
  EXPECT_FALSE(sink.ended_ok);
  auto rows = store_->ledger(c.budget_id, 10);
  ASSERT_TRUE(rows && rows->size() == 1);
  EXPECT_EQ((*rows)[0].outcome, "broken_stream");
  EXPECT_EQ((*rows)[0].cost_micros, (*rows)[0].reserved_micros);
  EXPECT_GT(spent(c), 50 * 2);
}

TEST_F(GatewayTest, CallerThatLeavesMidStreamIsChargedInputAndWhatWasRelayed) {
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
    write_all(fd, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    write_all(fd, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n");
  });
  auto gw = gateway(up.port());
  auto c = caller(1'000'000);
  CollectSink sink;
  sink.leave = true;  // the first write fails: the client went away
  gw->handle(c, "POST", "/chat/completions",
             R"({"model":"b3os/test","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]})", sink);
  auto rows = store_->ledger(c.budget_id, 10);
  ASSERT_TRUE(rows && rows->size() == 1);
  EXPECT_EQ((*rows)[0].outcome, "client_gone");
  EXPECT_EQ((*rows)[0].completion_tokens, 1);
  EXPECT_GT((*rows)[0].cost_micros, 0);
  EXPECT_LT((*rows)[0].cost_micros, (*rows)[0].reserved_micros);
}

TEST_F(GatewayTest, CallOverTheCapIsRefusedBeforeTheUpstream) {
  ScriptedUpstream up([](int fd, const std::string&) { write_all(fd, http_json(200, json::object())); });
  auto gw = gateway(up.port());
  auto c = caller(1'000);  // $0.001; 1000 output tokens at $2/M are $0.002: over the cap
  CollectSink sink;
  gw->handle(c, "POST", "/chat/completions", R"({"model":"b3os/test","messages":[{"role":"user","content":"hi"}]})", sink);
  EXPECT_EQ(sink.status, 402);
  EXPECT_EQ(sink.error()["code"], "spend_cap_reached");
  EXPECT_EQ(sink.error()["type"], "insufficient_quota");
  EXPECT_EQ(up.calls(), 0);
  EXPECT_EQ(spent(c), 0);
}

TEST_F(GatewayTest, DeadSlowAndFailingUpstreamsGiveClearErrorsInTime) {
  auto c = caller(std::nullopt);
  int dead_port;
  {
    ScriptedUpstream gone([](int, const std::string&) {});
    dead_port = gone.port();
  }
  CollectSink dead;
  gateway(dead_port)->handle(c, "POST", "/chat/completions", kHello, dead);
  EXPECT_EQ(dead.status, 502);
  EXPECT_EQ(dead.error()["code"], "upstream_unavailable");
  EXPECT_EQ(spent(c), 0) << "the request never left: nothing to charge";

  ScriptedUpstream slow([](int, const std::string&) { std::this_thread::sleep_for(std::chrono::milliseconds(2500)); });
  CollectSink timed_out;
  auto t0 = std::chrono::steady_clock::now();
  gateway(slow.port(), ",timeout=1")->handle(c, "POST", "/chat/completions", kHello, timed_out);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(timed_out.status, 504);
  EXPECT_EQ(timed_out.error()["code"], "upstream_timeout");
  EXPECT_LT(s, 2.0);

  ScriptedUpstream failing([](int fd, const std::string&) {
    write_all(fd, http_json(500, {{"error", {{"message", "out of memory"}, {"type", "server_error"}}}}));
  });
  CollectSink failed;
  gateway(failing.port())->handle(c, "POST", "/chat/completions", kHello, failed);
  EXPECT_EQ(failed.status, 502);
  EXPECT_EQ(failed.error()["code"], "upstream_error");
  EXPECT_EQ(failed.error()["type"], "server_error");
  EXPECT_NE(failed.error()["message"].get<std::string>().find("HTTP 500: out of memory"), std::string::npos);
  auto rows = store_->ledger(c.budget_id, 10);
  ASSERT_TRUE(rows && rows->size() == 3);
  EXPECT_EQ((*rows)[0].outcome, "upstream_error");
  EXPECT_EQ((*rows)[0].cost_micros, 0);
  EXPECT_EQ((*rows)[1].outcome, "upstream_timeout");
  EXPECT_EQ((*rows)[1].cost_micros, (*rows)[1].reserved_micros) << "sent, then no answer: the reservation";
}

TEST_F(GatewayTest, UpstreamRefusalsOfTheRequestPassOnAndItsOwnFaultsAre502) {
  auto c = caller(std::nullopt);
  // The upstream's 4xx: its status, type and code reach the caller, its message kept.
  ScriptedUpstream too_long([](int fd, const std::string&) {
    write_all(fd, http_json(400, {{"error", {{"message", "context too long"}, {"type", "invalid_request_error"},
                                             {"code", "context_length_exceeded"}}}}));
  });
  CollectSink refused;
  gateway(too_long.port())->handle(c, "POST", "/chat/completions", kHello, refused);
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.error()["code"], "context_length_exceeded");
  EXPECT_EQ(refused.error()["type"], "invalid_request_error");
  EXPECT_EQ(refused.error()["message"], "the model upstream answered HTTP 400: context too long");
  ScriptedUpstream busy([](int fd, const std::string&) { write_all(fd, http_json(429, json::object())); });
  CollectSink limited;
  gateway(busy.port())->handle(c, "POST", "/chat/completions", kHello, limited);
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(limited.error()["code"], "upstream_http_429") << "no code from the upstream: its status is named";
  EXPECT_EQ(limited.error()["type"], "invalid_request_error");
  // 401/403 are about the upstream's key, not the caller's: b3os's fault, 502.
  ScriptedUpstream bad_key([](int fd, const std::string&) {
    write_all(fd, http_json(401, {{"error", {{"message", "invalid api key"}, {"type", "authentication_error"},
                                             {"code", "invalid_api_key"}}}}));
  });
  CollectSink upstream_key;
  gateway(bad_key.port())->handle(c, "POST", "/chat/completions", kHello, upstream_key);
  EXPECT_EQ(upstream_key.status, 502);
  EXPECT_EQ(upstream_key.error()["code"], "upstream_error");
  EXPECT_EQ(upstream_key.error()["type"], "server_error");
  EXPECT_NE(upstream_key.error()["message"].get<std::string>().find("HTTP 401: invalid api key"), std::string::npos);
  // Something that is not JSON: the reservation is charged (the upstream may have worked).
  ScriptedUpstream garbage([](int fd, const std::string&) {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
  });
  CollectSink unreadable;
  gateway(garbage.port())->handle(c, "POST", "/chat/completions", kHello, unreadable);
  EXPECT_EQ(unreadable.status, 502);
  EXPECT_EQ(unreadable.error()["code"], "upstream_error");
  auto rows = store_->ledger(c.budget_id, 10);
  ASSERT_TRUE(rows && rows->size() == 4);
  EXPECT_EQ((*rows)[0].outcome, "upstream_unreadable");
  EXPECT_EQ((*rows)[0].status, 502);
  EXPECT_EQ((*rows)[0].cost_micros, (*rows)[0].reserved_micros);
  EXPECT_EQ((*rows)[1].status, 401) << "the ledger keeps the upstream's own status";
  EXPECT_EQ((*rows)[3].cost_micros, 0);
}

TEST_F(GatewayTest, AdmissionIsOneCheckForKeysAndSandboxes) {
  auto gw = gateway(1);
  auto key = store_->create_api_key("alpha");
  ASSERT_TRUE(key);
  const std::string project = key->record.project_id;
  Caller from_key{key->record.id, project, "", key->record.id};
  ASSERT_TRUE(store_->ensure_budget("grt_s", project, 1'000'000));
  Caller sandbox{"grt_s", project, "sbx_s", "", true};

  ASSERT_TRUE(gw->admit(from_key));
  EXPECT_TRUE(*store_->get_budget(key->record.id)) << "a key's budget exists from its first call";
  EXPECT_FALSE((*store_->get_budget(key->record.id))->cap_micros);
  EXPECT_TRUE(gw->admit(sandbox));

  Caller no_scope = sandbox;
  no_scope.infer_scope = false;
  auto r = gw->admit(no_scope);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kForbidden);
  EXPECT_NE(r.error().message.find("without the infer:run scope"), std::string::npos);
  Caller no_budget = sandbox;
  no_budget.budget_id.clear();
  EXPECT_EQ(gw->admit(no_budget).error().code, ErrorCode::kInternal);

  ASSERT_TRUE(store_->set_project_infer("alpha", false));
  r = gw->admit(from_key);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kForbidden);
  EXPECT_NE(r.error().message.find("this key's project may not use the model gateway"), std::string::npos);
  r = gw->admit(sandbox);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("this sandbox's project may not use the model gateway"), std::string::npos);
  ASSERT_TRUE(store_->set_project_infer("alpha", true));

  Gateway none({}, *budgets_);
  r = none.admit(sandbox);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kProductUnavailable);
  EXPECT_NE(r.error().message.find("--model"), std::string::npos);
}

TEST(UpstreamCalls, SayHowTheyFailedAsATypedKind) {
  using namespace std::chrono_literals;
  auto soon = [](auto d) { return std::chrono::steady_clock::now() + d; };
  auto request = [](int port) {
    UpstreamRequest r;
    r.host = "127.0.0.1";
    r.port = std::to_string(port);
    r.target = "/v1/chat/completions";
    r.body = "{}";
    return r;
  };
  int dead_port;
  {
    ScriptedUpstream gone([](int, const std::string&) {});
    dead_port = gone.port();
  }
  bool sent = true;
  auto dead = UpstreamCall::start(request(dead_port), soon(2s), nullptr, &sent);
  ASSERT_FALSE(dead);
  EXPECT_EQ(dead.error().kind, UpstreamFailure::kUnreachable) << dead.error().message;
  EXPECT_NE(dead.error().message.find("connecting to 127.0.0.1:"), std::string::npos) << dead.error().message;

  ScriptedUpstream slow([](int, const std::string&) { std::this_thread::sleep_for(1500ms); });
  sent = false;
  auto late = UpstreamCall::start(request(slow.port()), soon(300ms), nullptr, &sent);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().kind, UpstreamFailure::kTimeout) << late.error().message;
  EXPECT_TRUE(sent) << "the request left before the deadline passed";

  std::atomic<bool> leave{false};
  std::thread leaver([&] {
    std::this_thread::sleep_for(200ms);
    leave = true;
  });
  auto cancelled = UpstreamCall::start(request(slow.port()), soon(5s), [&] { return leave.load(); });
  leaver.join();
  ASSERT_FALSE(cancelled);
  EXPECT_EQ(cancelled.error().kind, UpstreamFailure::kCancelled) << cancelled.error().message;

  ScriptedUpstream cut([](int fd, const std::string&) {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nonly this");
  });
  auto call = UpstreamCall::start(request(cut.port()), soon(5s), nullptr);
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ((*call)->status(), 200);
  UpstreamResult<std::optional<std::string>> piece;
  do piece = (*call)->read(soon(5s), nullptr);
  while (piece && *piece);
  ASSERT_FALSE(piece);
  EXPECT_EQ(piece.error().kind, UpstreamFailure::kBroken) << piece.error().message;
}

TEST(ErrorAnswers, ComeFromTheOneTable) {
  CollectSink sink;
  answer_error(sink, {ErrorCode::kPaymentRequired, "spend cap $1.00 reached", 0});
  EXPECT_EQ(sink.status, 402);
  EXPECT_EQ(sink.content_type, "application/json");
  EXPECT_EQ(json::parse(sink.body), json::parse(R"({"error":{"message":"spend cap $1.00 reached","type":"insufficient_quota","param":null,"code":"spend_cap_reached"}})"));
  EXPECT_EQ(json::parse(openai_error_body(Error{ErrorCode::kUpstreamTimeout, "slow", 0}))["error"]["type"], "server_error");
}

TEST_F(GatewayTest, StalledChunkedStreamEndsAtTheDeadline) {
  // Chunked SSE (as llama.cpp and vLLM send it) that stalls after its first event.
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    std::string ev = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    char len[16];
    std::snprintf(len, sizeof len, "%zx\r\n", ev.size());
    write_all(fd, len + ev + "\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  });
  auto c = caller(1'000'000);
  CollectSink sink;
  auto t0 = std::chrono::steady_clock::now();
  gateway(up.port(), ",timeout=1")->handle(c, "POST", "/chat/completions",
                                           R"({"model":"b3os/test","stream":true,"messages":[{"role":"user","content":"hi"}]})", sink);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0) << "the read after the first chunk must still honour the deadline";
  EXPECT_TRUE(sink.ended);
  EXPECT_FALSE(sink.ended_ok);
  EXPECT_NE(sink.body.find("\"a\""), std::string::npos);
}

TEST_F(GatewayTest, HostileRequestsAreRefusedNotFatal) {
  auto gw = gateway(1);
  auto c = caller(1'000'000);
  for (const char* bad : {R"({"model":"b3os/test","messages":[{}],"stream":null,"stream_options":{}})",
                          R"({"model":"b3os/test","messages":[{}],"stream":"yes"})",
                          R"({"model":"b3os/test","messages":[{}],"stream":true,"stream_options":{"include_usage":1}})",
                          R"({"model":"b3os/test","messages":[{}],"stream":true,"stream_options":[]})"}) {
    CollectSink sink;
    gw->handle(c, "POST", "/chat/completions", bad, sink);
    EXPECT_EQ(sink.status, 400) << bad;
  }
  std::string deep = R"({"model":"b3os/test","messages":[{"role":"user","content":"x","x":)" + std::string(200000, '[') +
                     std::string(200000, ']') + "}]}";
  CollectSink sink;
  gw->handle(c, "POST", "/chat/completions", deep, sink);
  EXPECT_EQ(sink.status, 400);
  EXPECT_EQ(json_depth(R"({"a":"[[[[","b":[{"c":[]}]})"), 4u);
  EXPECT_EQ(spent(c), 0);
}

TEST_F(GatewayTest, LengthIsBoundInEveryFieldAndNeverChargedPastTheReservation) {
  // The upstream ignores the limit and reports a huge usage.
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, http_json(200, {{"choices", json::array()}, {"usage", {{"prompt_tokens", 10}, {"completion_tokens", 1000000}}}}));
  });
  auto gw = gateway(up.port());
  auto c = caller(std::nullopt);
  CollectSink sink;
  gw->handle(c, "POST", "/chat/completions",
             R"({"model":"b3os/test","max_completion_tokens":5,"max_tokens":100000,"n_predict":-1,"messages":[{"role":"user","content":"hi"}]})",
             sink);
  ASSERT_EQ(sink.status, 200);
  json sent = json::parse(up.last_request().substr(up.last_request().find("\r\n\r\n") + 4));
  EXPECT_EQ(sent["max_completion_tokens"], 5);
  EXPECT_EQ(sent["max_tokens"], 5);
  EXPECT_FALSE(sent.contains("n_predict"));
  auto rows = store_->ledger(c.budget_id, 10);
  ASSERT_TRUE(rows && rows->size() == 1);
  EXPECT_EQ((*rows)[0].cost_micros, (*rows)[0].reserved_micros);
  EXPECT_EQ((*rows)[0].outcome, "completed_over_reservation");
}

TEST_F(GatewayTest, UpstreamKeyGoesUpstreamOnly) {
  ::setenv("B3OS_TEST_UPSTREAM_KEY", "sk-upstream-secret", 1);
  ScriptedUpstream up([](int fd, const std::string&) {
    write_all(fd, http_json(200, {{"choices", json::array()}, {"usage", {{"prompt_tokens", 1}, {"completion_tokens", 1}}}}));
  });
  CollectSink sink;
  gateway(up.port(), ",key-env=B3OS_TEST_UPSTREAM_KEY")->handle(caller(1'000'000), "POST", "/chat/completions", kHello, sink);
  EXPECT_EQ(sink.status, 200);
  EXPECT_NE(up.last_request().find("Authorization: Bearer sk-upstream-secret"), std::string::npos);
  EXPECT_EQ(sink.body.find("sk-upstream-secret"), std::string::npos);
  ::unsetenv("B3OS_TEST_UPSTREAM_KEY");
}

TEST_F(GatewayTest, RequestsAreCheckedBeforeAnythingIsReserved) {
  auto gw = gateway(1);
  auto c = caller(1'000'000);
  for (const char* bad : {"not json", "[]", R"({"model":"b3os/test"})", R"({"model":"b3os/test","messages":[]})",
                          R"({"model":"b3os/test","messages":[{}],"n":0})", R"({"model":"b3os/test","messages":[{}],"max_tokens":-5})",
                          R"({"model":"b3os/test","messages":[{}],"stream_options":{"include_usage":true}})"}) {
    CollectSink sink;
    gw->handle(c, "POST", "/chat/completions", bad, sink);
    EXPECT_EQ(sink.status, 400) << bad;
  }
  CollectSink unknown;
  gw->handle(c, "POST", "/chat/completions", R"({"model":"nope","messages":[{}]})", unknown);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.error()["code"], "model_not_found");
  EXPECT_EQ(unknown.error()["type"], "invalid_request_error");
  EXPECT_TRUE(unknown.error()["param"].is_null());
  CollectSink not_json;
  gw->handle(c, "POST", "/chat/completions", "not json", not_json);
  EXPECT_EQ(not_json.error()["code"], "invalid_request") << "as the b3os API answers a body that is not JSON";
  CollectSink wrong_method;
  gw->handle(c, "GET", "/chat/completions", "", wrong_method);
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_EQ(wrong_method.error()["code"], "method_not_allowed");
  CollectSink nowhere;
  gw->handle(c, "GET", "/completions", "", nowhere);
  EXPECT_EQ(nowhere.status, 404);
  EXPECT_EQ(nowhere.error()["code"], "not_found");
  CollectSink models;
  gw->handle(c, "GET", "/models", "", models);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "b3os/test");
  Gateway none({}, *budgets_);
  CollectSink off;
  none.handle(c, "POST", "/chat/completions", kHello, off);
  EXPECT_EQ(off.status, 503);
  EXPECT_EQ(off.error()["code"], "product_unavailable");
  EXPECT_EQ(off.error()["type"], "server_error");
  EXPECT_NE(off.error()["message"].get<std::string>().find("--model"), std::string::npos);
  EXPECT_EQ(spent(c), 0);
}

TEST_F(GatewayTest, FiftyCallsRacingForTheLastDollarNeverPassTheCap) {
  // Each call's worst case is $0.002 (1000 tokens at $2/M, plus the prompt); the real cost
  // $0.0015. With $0.05 left, fewer than 25 calls may be admitted at once.
  ScriptedUpstream up([](int fd, const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // all 50 in flight together
    write_all(fd, http_json(200, {{"choices", json::array()}, {"usage", {{"prompt_tokens", 0}, {"completion_tokens", 750}}}}));
  });
  auto gw = gateway(up.port());
  auto c = caller(50'000);
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 50; ++i)
    ts.emplace_back([&] {
      CollectSink sink;
      gw->handle(c, "POST", "/chat/completions", R"({"model":"b3os/test","messages":[{"role":"user","content":"x"}]})", sink);
      (sink.status == 200 ? ok : refused)++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok + refused, 50);
  EXPECT_GT(ok, 0);
  EXPECT_GT(refused, 0);
  auto rows = store_->ledger(c.budget_id, 100);
  Micros sum = 0;
  for (auto& r : *rows) sum += r.cost_micros;
  EXPECT_LE(sum, 50'000);
  EXPECT_EQ(sum, spent(c));
  EXPECT_EQ(static_cast<int>(rows->size()), ok.load());
  // A new Budgets (a restart) sees the same spend.
  Budgets again(*store_);
  EXPECT_EQ(again.look(c.budget_id)->spent_micros, sum);
}

}  // namespace
}  // namespace b3os::gateway
