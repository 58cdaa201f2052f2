// HttpServer implementation. Requests are parsed by Beast; replies are written as raw HTTP/1.1
// bytes from a per-connection queue (complete responses with Content-Length, SSE as chunked
// transfer encoding), which keeps one code path for both and lets many small SSE events be
// coalesced into one write. While a request is in flight the socket is watched for EOF so a
// client that hangs up aborts its generation at once (B29), streaming or not.
// Slow clients only ever hold their own connection: the engine posts events and never waits on a
// socket; a request must arrive within request_timeout_s of its first byte (slowloris), and a
// reader that falls behind is closed at the write-buffer cap or the write timeout, which cancels
// its request.
#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>

#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace dsv4 {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

const char* reason_phrase(int status) {
    switch (status) {
        case 200:
            return "OK";
        case 400:
            return "Bad Request";
        case 401:
            return "Unauthorized";
        case 404:
            return "Not Found";
        case 405:
            return "Method Not Allowed";
        case 413:
            return "Payload Too Large";
        case 415:
            return "Unsupported Media Type";
        case 422:
            return "Unprocessable Entity";
        case 429:
            return "Too Many Requests";
        case 431:
            return "Request Header Fields Too Large";
        case 500:
            return "Internal Server Error";
        case 503:
            return "Service Unavailable";
        default:
            return "Unknown";
    }
}

class Session : public std::enable_shared_from_this<Session>, public ResponseWriter {
public:
    Session(tcp::socket&& s, App& app, const HttpServerOptions& opt) : stream_(std::move(s)), app_(app), opt_(opt) {
        ++app_.stats().connections_open;
        ++app_.stats().connections_total;
        beast::error_code ec;
        stream_.socket().set_option(tcp::no_delay(true), ec);
    }
    ~Session() override {
        if (streaming_) --app_.stats().streams_open;
        owe_reply(false);
        --app_.stats().connections_open;
    }

    void run() {
        net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::do_read, shared_from_this()));
    }

    void post(std::function<void()> fn) override { net::post(stream_.get_executor(), std::move(fn)); }

    void send(int status, const std::string& content_type, std::string body, const HeaderList& extra) override {
        if (response_done_) return;
        std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", status,
                                      reason_phrase(status), content_type, body.size());
        for (const auto& [k, v] : extra) out += k + ": " + v + "\r\n";
        out += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
        if (!head_) out += body;
        response_done_ = true;
        enqueue(std::move(out));
    }
    void start_stream() override {
        if (response_done_ || streaming_) return;
        streaming_ = true;
        ++app_.stats().streams_open;
        enqueue(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n") +
                (keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n"));
    }
    void stream_data(std::string data) override {
        if (response_done_ || data.empty()) return;
        enqueue(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
    }
    void end_stream() override {
        if (response_done_) return;
        response_done_ = true;
        if (streaming_) {
            streaming_ = false;
            --app_.stats().streams_open;
        }
        enqueue("0\r\n\r\n");
    }
    void on_disconnect(std::function<void()> fn) override { on_gone_ = std::move(fn); }

private:
    // Waiting for a request's first byte is idle time (idle_timeout_s); from there the whole
    // request must arrive within request_timeout_s.
    void do_read() {
        if (closed_) return;
        parser_.emplace();
        parser_->body_limit(opt_.max_body_bytes);
        parser_->header_limit(uint32_t(std::min<size_t>(opt_.max_header_bytes, UINT32_MAX)));
        if (buffer_.size() > 0) return read_request();  // pipelined: already under way
        stream_.expires_after(std::chrono::seconds(opt_.idle_timeout_s));
        stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
            self->buffer_.commit(n);
            if (self->closed_) return;
            if (ec || n == 0) return self->close();  // EOF, reset, idle timeout
            self->read_request();
        });
    }

    void read_request() {
        stream_.expires_after(std::chrono::seconds(opt_.request_timeout_s));
        http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_read, shared_from_this()));
    }

    void on_read(beast::error_code ec, size_t) {
        if (closed_) return;
        if (ec) {
            if (ec == beast::error::timeout) ++app_.stats().request_timeouts;
            if (ec == http::error::body_limit) return reject(413, "the request body is too large");
            if (ec == http::error::header_limit) return reject(431, "the request headers are too large");
            if (ec.category() == beast::http::make_error_code(http::error::bad_version).category() &&
                ec != http::error::end_of_stream && ec != http::error::partial_message)
                return reject(400, "malformed HTTP request");
            return close();  // EOF, reset, idle timeout
        }
        auto& msg = parser_->get();
        HttpRequest req{std::string(msg.method_string()), std::string(msg.target()),
                        std::string(msg[http::field::content_type]), std::move(msg.body()),
                        std::string(msg[http::field::authorization])};
        keep_alive_ = msg.keep_alive();
        head_ = msg.method() == http::verb::head;
        stream_.expires_never();
        response_done_ = false;
        on_gone_ = nullptr;
        ++generation_;
        watch_peer();
        owe_reply(true);
        app_.handle(req, shared_from_this());
    }

    void reject(int status, const std::string& message) {
        keep_alive_ = false;
        response_done_ = false;
        app_.count_status(status);
        send(status, "application/json", ApiError{status, message, "invalid_request_error", {}, {}}.body(), {});
    }

    // Readable with nothing to read = the peer closed its side while we still owe a reply.
    void watch_peer() {
        auto self = shared_from_this();
        const uint64_t gen = generation_;
        stream_.socket().async_wait(
            tcp::socket::wait_read, net::bind_executor(stream_.get_executor(), [self, gen](beast::error_code ec) {
                if (gen != self->generation_ || self->response_done_ || self->closed_) return;
                if (ec == net::error::operation_aborted) return;
                if (!ec) {
                    // Readiness can be stale (edge-triggered reactor): peek to tell EOF (0) from
                    // pipelined bytes (> 0) and from nothing at all (EAGAIN: wait again).
                    char c;
                    const ssize_t n = ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
                    if (n > 0) return;
                    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                        // Re-arm after a pause: an immediate re-wait can complete spuriously again.
                        auto timer = std::make_shared<net::steady_timer>(self->stream_.get_executor());
                        timer->expires_after(std::chrono::milliseconds(20));
                        timer->async_wait([self, timer, gen](beast::error_code) {
                            if (gen == self->generation_ && !self->response_done_ && !self->closed_) self->watch_peer();
                        });
                        return;
                    }
                }
                self->peer_gone();
            }));
    }

    void peer_gone() {
        if (closed_) return;
        auto fn = std::move(on_gone_);
        on_gone_ = nullptr;
        close();
        if (fn) fn();
    }

    // The cap counts only while a write is in flight: a response that arrives whole (one send())
    // is written however large it is; what piles up behind a write the client is not taking is
    // what a slow reader costs.
    void enqueue(std::string s) {
        if (closed_) return;
        queued_bytes_ += s.size();
        pending_.push_back(std::move(s));
        if (writing_ && queued_bytes_ > opt_.max_write_buffer_bytes) return slow_reader();
        if (!writing_) do_write();
    }

    void do_write() {
        writing_buf_.clear();
        for (auto& p : pending_) writing_buf_ += p;  // coalesce small SSE events
        pending_.clear();
        writing_ = true;
        written_ = 0;
        write_some();
    }

    // Piece by piece, each with its own deadline: a slow reader that keeps taking bytes is
    // served; one that takes nothing for write_timeout_s is not.
    void write_some() {
        stream_.expires_after(std::chrono::seconds(opt_.write_timeout_s));
        stream_.async_write_some(net::buffer(writing_buf_.data() + written_, writing_buf_.size() - written_),
                                 beast::bind_front_handler(&Session::on_write, shared_from_this()));
    }

    void on_write(beast::error_code ec, size_t n) {
        written_ += n;
        queued_bytes_ -= std::min(queued_bytes_, n);
        if (ec == beast::error::timeout) return slow_reader();
        if (ec) return peer_gone();
        if (written_ < writing_buf_.size()) return write_some();
        writing_ = false;
        if (!pending_.empty()) return do_write();
        if (response_done_) {
            on_gone_ = nullptr;
            owe_reply(false);
            if (keep_alive_)
                do_read();
            else
                close();
        } else {
            stream_.expires_never();  // a stream between events: the engine sets the pace
        }
    }

    void slow_reader() {
        if (closed_) return;
        ++app_.stats().slow_readers;
        peer_gone();
    }

    // Counted from a request handed to the app to its reply's last byte taken by the socket (or
    // the connection's end): what a drain waits for.
    void owe_reply(bool owe) {
        if (owe != owes_reply_) app_.stats().replies_pending += owe ? 1 : -1;
        owes_reply_ = owe;
    }

    void close() {
        if (closed_) return;
        closed_ = true;
        owe_reply(false);
        pending_.clear();
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream_.socket().close(ec);
    }

    beast::tcp_stream stream_;
    App& app_;
    const HttpServerOptions& opt_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::deque<std::string> pending_;
    std::string writing_buf_;
    size_t written_ = 0;  // of writing_buf_
    size_t queued_bytes_ = 0;
    bool writing_ = false;
    bool keep_alive_ = true;
    bool head_ = false;
    bool response_done_ = true;
    bool streaming_ = false;
    bool closed_ = false;
    bool owes_reply_ = false;
    uint64_t generation_ = 0;
    std::function<void()> on_gone_;
};

}  // namespace

struct HttpServer::Impl {
    // The acceptor and its retry timer on one strand: the accept handler (is_open, async_accept) and
    // the close that stop() posts would otherwise run on two io threads at once (a TSan report).
    Impl(App& a, HttpServerOptions o)
        : app(a), opt(std::move(o)), acceptor(net::make_strand(ioc)), retry(acceptor.get_executor()) {}

    void do_accept() {
        acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
            if (!acceptor.is_open()) return;
            if (ec) {
                // Out of file descriptors and the like: back off briefly instead of spinning.
                retry.expires_after(std::chrono::milliseconds(20));
                retry.async_wait([this](beast::error_code) { do_accept(); });
                return;
            }
            if (app.stats().connections_open.load() >= opt.max_connections) {
                // Over the cap: a short 503 written synchronously (small, fits the socket buffer), then close.
                beast::error_code ignored;
                const std::string body =
                    ApiError{503, "too many open connections; retry later", "server_error", {}, "too_many_connections"}
                        .body();
                const std::string msg = fmt::format(
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    "Connection: close\r\nContent-Length: {}\r\n\r\n{}",
                    body.size(), body);
                s.non_blocking(true, ignored);
                s.write_some(net::buffer(msg), ignored);
                s.shutdown(tcp::socket::shutdown_both, ignored);
                s.close(ignored);
                app.count_status(503);
                do_accept();
                return;
            }
            std::make_shared<Session>(std::move(s), app, opt)->run();
            do_accept();
        });
    }

    App& app;
    HttpServerOptions opt;
    net::io_context ioc;
    tcp::acceptor acceptor;
    net::steady_timer retry;
    std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
    std::vector<std::thread> threads;
    // wait_for_signal() / wake(): the io_context the waiter runs (null when none), and whether
    // wake() came (it may come before the wait starts).
    std::mutex wait_mu;
    net::io_context* waiting = nullptr;
    bool woken = false;
};

HttpServer::HttpServer(App& app, HttpServerOptions opt) : impl_(std::make_unique<Impl>(app, std::move(opt))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
    // Each connection is a file descriptor: lift the soft limit to the hard one.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    beast::error_code ec;
    const auto addr = net::ip::make_address(impl_->opt.host, ec);
    if (ec) return invalid_argument("bad --host '{}': {}", impl_->opt.host, ec.message());
    const tcp::endpoint ep(addr, impl_->opt.port);
    auto& acc = impl_->acceptor;
    acc.open(ep.protocol(), ec);
    if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acc.bind(ep, ec);
    if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
    if (ec)
        return error(StatusCode::kUnavailable, "cannot listen on {}:{}: {}", impl_->opt.host, impl_->opt.port,
                     ec.message());
    impl_->work.emplace(impl_->ioc.get_executor());
    impl_->do_accept();
    for (int i = 0; i < std::max(1, impl_->opt.io_threads); ++i)
        impl_->threads.emplace_back([this] { impl_->ioc.run(); });
    return Status::ok();
}

uint16_t HttpServer::port() const {
    beast::error_code ec;
    return impl_->acceptor.local_endpoint(ec).port();
}

bool HttpServer::wait_for_signal() {
    net::io_context sig_ioc;
    net::signal_set signals(sig_ioc, SIGINT, SIGTERM);
    bool signalled = false;
    signals.async_wait([&](beast::error_code ec, int) { signalled = !ec; });
    {
        std::lock_guard lk(impl_->wait_mu);
        if (impl_->woken) return false;
        impl_->waiting = &sig_ioc;
    }
    sig_ioc.run();  // until the handler ran, or wake() stopped it
    std::lock_guard lk(impl_->wait_mu);
    impl_->waiting = nullptr;
    return signalled;
}

void HttpServer::wake() {
    std::lock_guard lk(impl_->wait_mu);
    impl_->woken = true;
    if (impl_->waiting) impl_->waiting->stop();
}

void HttpServer::stop_accepting() {
    if (!impl_ || impl_->threads.empty()) return;
    net::post(impl_->acceptor.get_executor(), [this] {
        beast::error_code ec;
        impl_->acceptor.close(ec);
    });
}

void HttpServer::stop() {
    if (!impl_ || impl_->threads.empty()) return;
    net::post(impl_->acceptor.get_executor(), [this] {
        beast::error_code ec;
        impl_->acceptor.close(ec);
    });
    impl_->work.reset();
    impl_->ioc.stop();
    for (auto& t : impl_->threads) t.join();
    impl_->threads.clear();
}

}  // namespace dsv4
