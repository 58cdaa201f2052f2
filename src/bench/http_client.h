// HTTP side of the load generator: URL parsing, a blocking GET (model discovery, readiness
// probes), a blocking small POST, and the asynchronous streaming batch runner that keeps
// `concurrency` requests in flight on one io thread until a list of jobs is done.
// Only http_client.cpp includes Boost.Beast (it compiles slowly).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/sse.h"
#include "core/status.h"

namespace dsv4::bench {

struct Url {
    std::string host;
    std::string port = "80";
    std::string base_path;  // without trailing '/', e.g. "" or "/proxy"; "/v1" is added by callers
    std::string to_string() const;
};
// Accepts "http://host[:port][/path]" or "host:port". https is not supported (loopback and
// cluster-internal benchmarking do not need TLS, and it would add OpenSSL to the deps).
Result<Url> parse_url(std::string_view text);

struct HttpResponse {
    int status = 0;
    std::string body;
};
Result<HttpResponse> http_get(const Url& url, const std::string& path, double timeout_s);
Result<HttpResponse> http_post_json(const Url& url, const std::string& path, const std::string& body, double timeout_s);

struct StreamJob {
    std::string body;  // JSON request body with "stream": true
    int64_t expected_prompt_tokens = -1;
};

struct BatchOptions {
    Url url;
    std::string path;        // "/v1/chat/completions" etc. (base_path is prepended)
    int concurrency = 1;     // closed loop: requests in flight; open loop: the cap
    double timeout_s = 600;  // per request, connect to last byte
    // Open loop (as `vllm bench serve --request-rate`): > 0 requests/s arriving as a Poisson
    // process (exponential gaps drawn from arrival_seed); an arrival waits while `concurrency`
    // requests are in flight. 0: closed loop (the next request starts when one finishes).
    double request_rate = 0;
    uint64_t arrival_seed = 1;
};

// Arrival times in seconds from the start of a batch of n open-loop requests at `rate` per second
// (cumulative exponential gaps, Philox-seeded: the same times for the same seed).
std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed);

// Called on the io thread after every finished request.
using ProgressFn = std::function<void(int done, int errors)>;

// Runs all jobs, at most `concurrency` at a time; records[i] belongs to jobs[i]. Times in the
// records are seconds since the batch started. Fails only when the host does not resolve;
// per-request failures are recorded in the records.
Result<std::vector<RequestRecord>> run_streaming_batch(const BatchOptions& opt, const std::vector<StreamJob>& jobs,
                                                       const ProgressFn& progress);

}  // namespace dsv4::bench
