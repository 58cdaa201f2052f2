// Fake OpenAI streaming server (see fake_openai_server.h). The response is written by hand
// as HTTP/1.1 chunked transfer encoding so that every SSE event leaves in its own chunk, as
// real engines do; the client under test must decode chunked framing.
#include "tests/bench/fake_openai_server.h"

#include <chrono>
#include <deque>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsv4::bench::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct FakeOpenAiServer::Impl {
    FakeServerOptions opt;
    asio::io_context io;
    tcp::acceptor acceptor{io};
    std::thread thread;
    std::atomic<int> served{0};
    int active = 0;  // io thread only
    int port = 0;

    void accept();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
public:
    Session(FakeOpenAiServer::Impl& srv, tcp::socket s) : srv_(srv), socket_(std::move(s)), timer_(srv.io) {}

    void start() {
        parser_.body_limit(1 << 24);
        http::async_read(socket_, buf_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
            if (!ec) self->on_request();
        });
    }

private:
    void write_plain(int status, const std::string& content_type, const std::string& body) {
        out_ = fmt::format(
            "HTTP/1.1 {} X\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
            "Connection: close\r\n\r\n{}",
            status, content_type, body.size(), body);
        asio::async_write(socket_, asio::buffer(out_),
                          [self = shared_from_this()](beast::error_code, size_t) { self->close(); });
    }

    void on_request() {
        const auto& req = parser_.get();
        const std::string target(req.target());
        if (req.method() == http::verb::get && target == "/v1/models") {
            nlohmann::json j = {{"object", "list"}, {"data", {{{"id", srv_.opt.model}, {"object", "model"}}}}};
            return write_plain(200, "application/json", j.dump());
        }
        const bool chat = target == "/v1/chat/completions";
        if (req.method() != http::verb::post || (!chat && target != "/v1/completions")) {
            return write_plain(404, "application/json", R"({"error":{"message":"not found"}})");
        }
        auto j = nlohmann::json::parse(req.body(), nullptr, false);
        if (j.is_discarded() || j.value("model", "") != srv_.opt.model) {
            return write_plain(404, "application/json",
                               R"({"error":{"message":"unknown model","type":"invalid_request_error"}})");
        }
        chat_ = chat;
        n_tokens_ = j.value("max_tokens", 16);
        usage_ =
            srv_.opt.send_usage && j.contains("stream_options") && j["stream_options"].value("include_usage", false);
        ++srv_.active;
        ++srv_.served;
        out_ =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return self->finish_stream();
            self->schedule(self->srv_.opt.ttft_ms);
        });
    }

    void schedule(double ms) {
        timer_.expires_after(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
        timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
            if (ec) return self->finish_stream();
            self->next_event();
        });
    }

    std::string token_event(int i) const {
        nlohmann::json c;
        if (chat_) {
            c = {{"object", "chat.completion.chunk"},
                 {"choices", {{{"index", 0}, {"delta", {{"content", fmt::format("t{} ", i)}}}}}}};
        } else {
            c = {{"object", "text_completion"}, {"choices", {{{"index", 0}, {"text", fmt::format("t{} ", i)}}}}};
        }
        if (i + 1 == n_tokens_) c["choices"][0]["finish_reason"] = "length";
        return "data: " + c.dump() + "\n\n";
    }

    void next_event() {
        std::string ev;
        bool last = false;
        if (sent_ < n_tokens_) {
            ev = token_event(sent_++);
        } else if (usage_ && !usage_sent_) {
            usage_sent_ = true;
            nlohmann::json u = {{"object", "chat.completion.chunk"},
                                {"choices", nlohmann::json::array()},
                                {"usage",
                                 {{"prompt_tokens", srv_.opt.prompt_tokens},
                                  {"completion_tokens", n_tokens_},
                                  {"total_tokens", srv_.opt.prompt_tokens + n_tokens_}}}};
            ev = "data: " + u.dump() + "\n\n";
        } else {
            ev = "data: [DONE]\n\n";
            last = true;
        }
        out_ = fmt::format("{:x}\r\n{}\r\n", ev.size(), ev);
        if (last) out_ += "0\r\n\r\n";
        asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this(), last](beast::error_code ec, size_t) {
            if (ec || last) return self->finish_stream();
            const bool token_next = self->sent_ < self->n_tokens_;
            const auto& o = self->srv_.opt;
            const double wait = token_next ? o.per_token_ms + o.per_active_ms * (self->srv_.active - 1) : 0;
            self->schedule(wait);
        });
    }

    void finish_stream() {
        if (!finished_) {
            finished_ = true;
            --srv_.active;
        }
        close();
    }

    void close() {
        beast::error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        socket_.close(ignored);
    }

    FakeOpenAiServer::Impl& srv_;
    tcp::socket socket_;
    asio::steady_timer timer_;
    beast::flat_buffer buf_;
    http::request_parser<http::string_body> parser_;
    std::string out_;
    bool chat_ = true, usage_ = false, usage_sent_ = false, finished_ = false;
    int n_tokens_ = 0, sent_ = 0;
};

}  // namespace

void FakeOpenAiServer::Impl::accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
        if (ec) return;  // acceptor closed
        std::make_shared<Session>(*this, std::move(s))->start();
        accept();
    });
}

FakeOpenAiServer::FakeOpenAiServer(FakeServerOptions opt) : impl_(std::make_unique<Impl>()) {
    impl_->opt = std::move(opt);
    tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen(1024);
    impl_->port = impl_->acceptor.local_endpoint().port();
    impl_->accept();
    impl_->thread = std::thread([this] { impl_->io.run(); });
}

FakeOpenAiServer::~FakeOpenAiServer() {
    impl_->io.stop();
    impl_->thread.join();
}

int FakeOpenAiServer::port() const { return impl_->port; }
int FakeOpenAiServer::requests_served() const { return impl_->served.load(); }

}  // namespace dsv4::bench::testing
