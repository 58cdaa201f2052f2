// HttpServer over a real loopback socket (port 0) with the fake model: the one C++ suite that runs
// the Beast sessions, the SSE chunking and the disconnect watch, so the sanitizers see them (the
// Node e2e tests serve the reference model, which the sanitized builds leave out). The client is
// plain POSIX sockets, one request per connection ("Connection: close": the reply ends at EOF), so
// it shares no code with the server it checks.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "sched/engine.h"
#include "sched/fake_runner.h"
#include "server/app.h"
#include "tests/server/fault_test_util.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr size_t kBodyLimit = 64u << 10;  // small, so the 413 case costs nothing

// A connected socket; receives time out so a server that never answers fails the test instead of
// hanging it.
int connect_to(uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    timeval tv{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

bool send_all(int fd, const std::string& s) {
    for (size_t off = 0; off < s.size();) {
        const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return false;
        off += size_t(n);
    }
    return true;
}

std::string request(const std::string& method, const std::string& path, const std::string& body = "") {
    std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    if (method == "POST")
        r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    return r + "\r\n" + body;
}

struct Reply {
    int status = 0;
    std::string head, body;  // body as sent: chunk framing included for SSE
};

// Sends `raw` and reads to EOF.
Reply roundtrip(uint16_t port, const std::string& raw) {
    Reply r;
    const int fd = connect_to(port);
    if (fd < 0 || !send_all(fd, raw)) {
        if (fd >= 0) ::close(fd);
        return r;
    }
    std::string all;
    char buf[16384];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) all.append(buf, size_t(n));
    ::close(fd);
    const size_t end = all.find("\r\n\r\n");
    if (all.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
    r.status = std::stoi(all.substr(9, 3));
    r.head = all.substr(0, end);
    r.body = all.substr(end + 4);
    return r;
}

std::string chat_body(bool stream, int max_tokens) {
    return json{{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                {"max_tokens", max_tokens},
                {"ignore_eos", true},
                {"stream", stream}}
        .dump();
}
std::string completion_body(bool stream, int max_tokens) {
    return json{{"prompt", {5, 6, 7, 8}},
                {"max_tokens", max_tokens},
                {"ignore_eos", true},
                {"temperature", 0},
                {"stream", stream}}
        .dump();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A whole SSE reply: the last event, then the chunked terminator.
void expect_complete_stream(const Reply& r) {
    EXPECT_EQ(r.status, 200) << r.head;
    EXPECT_TRUE(contains(r.head, "text/event-stream")) << r.head;
    EXPECT_TRUE(contains(r.body, "data: [DONE]")) << r.body;
    EXPECT_TRUE(r.body.size() >= 5 && r.body.compare(r.body.size() - 5, 5, "0\r\n\r\n") == 0) << r.body;
}

// Polls a condition the test cannot be told about (the server's counters); the deadline only
// turns a hang into a failure.
bool eventually(const std::function<bool()>& cond, std::chrono::seconds limit = 30s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!cond()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

// Engine (fake runner, byte tokenizer), App and a started HttpServer on a free port. Members are
// destroyed server first: the sessions it frees count down the App's stats.
class HttpServerTest : public ::testing::Test {
protected:
    void SetUp() override {
        FakeRunnerOptions fo = test::faulty_fake_model(0, step_delay_us());  // 0: no fault
        engine_ = std::make_unique<Engine>(std::make_unique<FakeRunner>(fo), EngineConfig{});
        app_ = std::make_unique<App>(*engine_, test::byte_tokenizer(), AppOptions{});
        HttpServerOptions o;
        o.port = 0;
        o.max_body_bytes = kBodyLimit;
        server_ = std::make_unique<HttpServer>(*app_, o);
        engine_->start();
        ASSERT_TRUE(server_->start().is_ok());
        port_ = server_->port();
        ASSERT_NE(port_, 0);
    }
    // Every test ends idle: nothing running or owed, so the clean stop below frees everything.
    void TearDown() override {
        EXPECT_TRUE(eventually([&] {
            return engine_->stats().running_requests.load() + engine_->stats().waiting_requests.load() == 0 &&
                   app_->stats().replies_pending.load() == 0;
        }));
        server_->stop();
        engine_->stop();
        server_.reset();
        EXPECT_EQ(app_->stats().connections_open.load(), 0);
        app_.reset();
        engine_.reset();
    }
    virtual int64_t step_delay_us() const { return 0; }

    std::unique_ptr<Engine> engine_;
    std::unique_ptr<App> app_;
    std::unique_ptr<HttpServer> server_;
    uint16_t port_ = 0;
};

TEST_F(HttpServerTest, ChatCompletionNonStreaming) {
    const Reply r = roundtrip(port_, request("POST", "/v1/chat/completions", chat_body(false, 8)));
    ASSERT_EQ(r.status, 200) << r.head << r.body;
    const json j = json::parse(r.body);
    EXPECT_EQ(j.value("object", ""), "chat.completion");
    EXPECT_EQ(j["usage"].value("completion_tokens", -1), 8) << r.body;
    EXPECT_TRUE(j["choices"][0].contains("message")) << r.body;
}

TEST_F(HttpServerTest, StreamingCompletionEndsWithDone) {
    const Reply r = roundtrip(port_, request("POST", "/v1/completions", completion_body(true, 16)));
    expect_complete_stream(r);
    EXPECT_TRUE(contains(r.body, "\"finish_reason\":\"length\"")) << r.body;
}

TEST_F(HttpServerTest, HealthAndMetrics) {
    const Reply h = roundtrip(port_, request("GET", "/health"));
    EXPECT_EQ(h.status, 200) << h.body;
    // A request first, so the counters /metrics shows have moved.
    EXPECT_EQ(roundtrip(port_, request("POST", "/v1/completions", completion_body(false, 4))).status, 200);
    const Reply m = roundtrip(port_, request("GET", "/metrics"));
    EXPECT_EQ(m.status, 200);
    EXPECT_TRUE(contains(m.body, "\ndsv4_engine_failed 0\n")) << m.body;
    EXPECT_TRUE(contains(m.body, "dsv4_http_requests_total")) << m.body;
    EXPECT_TRUE(contains(m.body, "dsv4_generation_tokens_total 4\n")) << m.body;
}

TEST_F(HttpServerTest, MalformedJsonIs400) {
    const Reply r = roundtrip(port_, request("POST", "/v1/chat/completions", "{\"messages\": [oops"));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_TRUE(contains(r.body, "\"error\"")) << r.body;
}

// Only the head is sent: its Content-Length alone is over the limit, and a body the server will
// not read could make its close a reset that loses the 413.
TEST_F(HttpServerTest, OverLimitBodyIs413) {
    const std::string head =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(kBodyLimit + 1) + "\r\n\r\n";
    const Reply r = roundtrip(port_, head);
    EXPECT_EQ(r.status, 413) << r.head << r.body;
}

// Requests from several client threads at once, streaming and not, all answered in full: the
// sessions on the io threads against the engine thread posting their events.
TEST_F(HttpServerTest, ConcurrentClients) {
    constexpr int kClients = 8;
    std::vector<Reply> replies(kClients);
    std::vector<std::thread> threads;
    for (int i = 0; i < kClients; ++i)
        threads.emplace_back([&, i] {
            const bool stream = i % 2 == 0;
            const std::string body = i % 4 < 2 ? completion_body(stream, 12) : chat_body(stream, 12);
            replies[size_t(i)] =
                roundtrip(port_, request("POST", i % 4 < 2 ? "/v1/completions" : "/v1/chat/completions", body));
        });
    for (auto& t : threads) t.join();
    for (int i = 0; i < kClients; ++i) {
        SCOPED_TRACE(i);
        if (i % 2 == 0) {
            expect_complete_stream(replies[size_t(i)]);
        } else {
            ASSERT_EQ(replies[size_t(i)].status, 200) << replies[size_t(i)].body;
            EXPECT_EQ(json::parse(replies[size_t(i)].body)["usage"].value("completion_tokens", -1), 12);
        }
    }
}

// Slow steps so the stream is still running when the client hangs up.
class HttpServerSlowTest : public HttpServerTest {
protected:
    int64_t step_delay_us() const override { return 2000; }
};

// A client that reads the first event and hangs up: the request is cancelled (not run to its 3,000
// tokens), its pages go back and the server still answers others.
TEST_F(HttpServerSlowTest, ClientDisconnectMidStreamCancelsTheRequest) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, request("POST", "/v1/completions", completion_body(true, 3000))));
    std::string got;
    char buf[4096];
    while (!contains(got, "data: ")) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        ASSERT_GT(n, 0) << got;
        got.append(buf, size_t(n));
    }
    ::close(fd);
    const EngineStats& es = engine_->stats();
    EXPECT_TRUE(eventually([&] {
        return app_->stats().client_disconnects.load() == 1 && es.requests_aborted_total.load() == 1 &&
               es.running_requests.load() == 0 && es.pages_used.load() == es.prefix_cache_pages.load();
    })) << "disconnects "
        << app_->stats().client_disconnects.load() << ", aborted " << es.requests_aborted_total.load() << ", running "
        << es.running_requests.load();
    EXPECT_LT(es.generated_tokens_total.load(), 3000);
    EXPECT_EQ(roundtrip(port_, request("POST", "/v1/completions", completion_body(false, 4))).status, 200);
}

}  // namespace
}  // namespace dsv4
