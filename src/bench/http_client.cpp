// Boost.Beast client for the benchmark. One io_context on the calling thread drives every
// request of a batch: each request is a Call object (connect, write, read header, then read
// the body piecewise into a fixed buffer so chunk arrival times are seen as they happen).
// A new connection per request keeps requests independent; on loopback connecting costs
// microseconds against TTFTs of milliseconds.
#include "bench/http_client.h"

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/philox.h"

namespace dsv4::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Url::to_string() const { return "http://" + host + ":" + port + base_path; }

Result<Url> parse_url(std::string_view text) {
    Url u;
    std::string_view rest = text;
    if (rest.starts_with("https://")) {
        return invalid_argument("https URLs are not supported (use http://): {}", text);
    }
    if (rest.starts_with("http://")) rest.remove_prefix(7);
    const size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (slash != std::string_view::npos) u.base_path = std::string(rest.substr(slash));
    while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
    // "/v1" is appended by callers; accept URLs that already carry it.
    if (u.base_path.ends_with("/v1")) u.base_path.resize(u.base_path.size() - 3);
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
        u.host = std::string(authority.substr(0, colon));
        u.port = std::string(authority.substr(colon + 1));
    } else {
        u.host = std::string(authority);
    }
    if (u.host.starts_with("[") && u.host.ends_with("]")) u.host = u.host.substr(1, u.host.size() - 2);
    if (u.host.empty()) return invalid_argument("URL has no host: {}", text);
    if (u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos) {
        return invalid_argument("URL has a bad port: {}", text);
    }
    return u;
}

namespace {

Result<HttpResponse> blocking_request(const Url& url, http::verb verb, const std::string& path, const std::string& body,
                                      double timeout_s) {
    asio::io_context io;
    tcp::resolver resolver(io);
    beast::error_code ec;
    auto endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) return error(StatusCode::kUnavailable, "resolve {}: {}", url.host, ec.message());
    beast::tcp_stream stream(io);
    stream.expires_after(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s)));
    stream.connect(endpoints, ec);
    if (ec) return error(StatusCode::kUnavailable, "connect {}: {}", url.to_string(), ec.message());
    http::request<http::string_body> req{verb, url.base_path + path, 11};
    req.set(http::field::host, url.host);
    req.set(http::field::user_agent, "dsv4-bench");
    req.keep_alive(false);
    if (verb == http::verb::post) {
        req.set(http::field::content_type, "application/json");
        req.body() = body;
        req.prepare_payload();
    }
    http::write(stream, req, ec);
    if (ec) return error(StatusCode::kUnavailable, "write {}: {}", path, ec.message());
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::read(stream, buf, parser, ec);
    if (ec) return error(StatusCode::kUnavailable, "read {}: {}", path, ec.message());
    HttpResponse r;
    r.status = static_cast<int>(parser.get().result_int());
    r.body = parser.get().body();
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    return r;
}

class BatchState;

// One streamed request. Owned by shared_ptrs held in its own pending handlers.
class Call : public std::enable_shared_from_this<Call> {
public:
    Call(BatchState& batch, size_t index);
    void start();

private:
    void on_connect(beast::error_code ec);
    void on_write(beast::error_code ec);
    void on_header(beast::error_code ec);
    void read_body();
    void on_body(beast::error_code ec);
    void finish(const std::string& failure);

    BatchState& batch_;
    size_t index_;
    RequestRecord& rec_;
    StreamRecorder recorder_;
    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    http::request<http::string_body> req_;
    http::response_parser<http::buffer_body> parser_;
    std::array<char, 16384> body_buf_{};
    std::string error_body_;  // body of a non-200 answer, for the error message
};

class BatchState {
public:
    BatchState(const BatchOptions& opt, const std::vector<StreamJob>& jobs, const ProgressFn& progress)
        : opt(opt), jobs(jobs), records(jobs.size()), progress_(progress) {}

    double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
    // Starts what may start: arrived, not started, fewer than `concurrency` in flight.
    void launch_ready() {
        while (next_ < arrived_ && in_flight_ < opt.concurrency) {
            ++in_flight_;
            std::make_shared<Call>(*this, next_++)->start();
        }
    }
    void start() {
        if (opt.request_rate <= 0) {
            arrived_ = jobs.size();
            launch_ready();
            return;
        }
        arrivals_ = poisson_arrivals(int(jobs.size()), opt.request_rate, opt.arrival_seed);
        arm_arrival();
    }
    void on_done(const RequestRecord& rec) {
        ++done_;
        --in_flight_;
        if (!rec.ok) ++errors_;
        if (progress_) progress_(done_, errors_);
        launch_ready();
    }

    const BatchOptions& opt;
    const std::vector<StreamJob>& jobs;
    std::vector<RequestRecord> records;
    asio::io_context io;
    tcp::resolver::results_type endpoints;

private:
    // Open loop: wait for the next arrival time, count it arrived, launch, re-arm.
    void arm_arrival() {
        if (arrived_ >= jobs.size()) return;
        timer_.expires_at(t0_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(arrivals_[arrived_])));
        timer_.async_wait([this](beast::error_code ec) {
            if (ec) return;
            ++arrived_;
            launch_ready();
            arm_arrival();
        });
    }
    const ProgressFn& progress_;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
    asio::steady_timer timer_{io};
    std::vector<double> arrivals_;
    size_t next_ = 0, arrived_ = 0;
    int in_flight_ = 0;
    int done_ = 0, errors_ = 0;
};

Call::Call(BatchState& batch, size_t index)
    : batch_(batch), index_(index), rec_(batch.records[index]), recorder_(rec_), stream_(batch.io) {
    const BatchOptions& o = batch.opt;
    req_ = http::request<http::string_body>{http::verb::post, o.url.base_path + o.path, 11};
    req_.set(http::field::host, o.url.host);
    req_.set(http::field::user_agent, "dsv4-bench");
    req_.set(http::field::content_type, "application/json");
    req_.set(http::field::accept, "text/event-stream");
    req_.keep_alive(false);
    req_.body() = batch.jobs[index].body;
    req_.prepare_payload();
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    rec_.expected_prompt_tokens = batch.jobs[index].expected_prompt_tokens;
}

void Call::start() {
    rec_.start = batch_.now();
    stream_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(batch_.opt.timeout_s)));
    stream_.async_connect(batch_.endpoints,
                          [self = shared_from_this()](beast::error_code ec, const auto&) { self->on_connect(ec); });
}

void Call::on_connect(beast::error_code ec) {
    if (ec) return finish("connect: " + ec.message());
    stream_.socket().set_option(tcp::no_delay(true), ec);
    http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code e, size_t) { self->on_write(e); });
}

void Call::on_write(beast::error_code ec) {
    if (ec) return finish("write: " + ec.message());
    http::async_read_header(stream_, buffer_, parser_,
                            [self = shared_from_this()](beast::error_code e, size_t) { self->on_header(e); });
}

void Call::on_header(beast::error_code ec) {
    if (ec) return finish("read header: " + ec.message());
    rec_.http_status = static_cast<int>(parser_.get().result_int());
    rec_.retry_after = parser_.get().find(http::field::retry_after) != parser_.get().end();
    if (parser_.is_done()) return finish(rec_.http_status == 200 ? "" : "empty body");
    read_body();
}

void Call::read_body() {
    parser_.get().body().data = body_buf_.data();
    parser_.get().body().size = body_buf_.size();
    http::async_read_some(stream_, buffer_, parser_,
                          [self = shared_from_this()](beast::error_code e, size_t) { self->on_body(e); });
}

void Call::on_body(beast::error_code ec) {
    const size_t got = body_buf_.size() - parser_.get().body().size;
    if (ec == http::error::need_buffer) ec = {};
    if (got > 0) {
        std::string_view bytes(body_buf_.data(), got);
        if (rec_.http_status == 200) {
            recorder_.on_body(bytes, batch_.now());
        } else if (error_body_.size() < 2000) {
            error_body_.append(bytes);
        }
    }
    if (ec) return finish("read body: " + ec.message());
    if (parser_.is_done()) return finish("");
    read_body();
}

void Call::finish(const std::string& failure) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    recorder_.finish(batch_.now());
    if (rec_.http_status != 0 && rec_.http_status != 200) {
        rec_.ok = false;
        rec_.error = "HTTP " + std::to_string(rec_.http_status) + ": " + error_body_.substr(0, 300);
    } else if (!failure.empty()) {
        rec_.ok = false;
        rec_.error = failure;
    }
    batch_.on_done(rec_);
}

}  // namespace

Result<HttpResponse> http_get(const Url& url, const std::string& path, double timeout_s) {
    return blocking_request(url, http::verb::get, path, "", timeout_s);
}

Result<HttpResponse> http_post_json(const Url& url, const std::string& path, const std::string& body,
                                    double timeout_s) {
    return blocking_request(url, http::verb::post, path, body, timeout_s);
}

std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed) {
    std::vector<double> t(size_t(std::max(n, 0)));
    double at = 0;
    for (int i = 0; i < n; ++i) {
        // u in (0, 1]: -log(u) / rate is an exponential gap with mean 1 / rate.
        const double u = 1.0 - double(philox_uniform(seed, 0x0a11, uint64_t(i)));
        at += -std::log(u) / rate;
        t[size_t(i)] = at;
    }
    return t;
}

Result<std::vector<RequestRecord>> run_streaming_batch(const BatchOptions& opt, const std::vector<StreamJob>& jobs,
                                                       const ProgressFn& progress) {
    if (opt.concurrency < 1) return invalid_argument("concurrency must be >= 1");
    BatchState state(opt, jobs, progress);
    tcp::resolver resolver(state.io);
    beast::error_code ec;
    state.endpoints = resolver.resolve(opt.url.host, opt.url.port, ec);
    if (ec) return error(StatusCode::kUnavailable, "resolve {}: {}", opt.url.host, ec.message());
    if (opt.request_rate < 0) return invalid_argument("request rate must be >= 0 (got {})", opt.request_rate);
    state.start();
    state.io.run();
    return std::move(state.records);
}

}  // namespace dsv4::bench
