// HttpServer: HTTP/1.1 on Boost.Beast/Asio. A few I/O threads run one io_context; every
// connection is a small object on its own strand (no thread per connection), so thousands of
// idle or streaming clients cost memory, not threads. The only file that includes Beast.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/app.h"

namespace dsv4 {

struct HttpServerOptions {
    std::string host = "127.0.0.1";
    uint16_t port = 8000;  // 0 = any free port (see HttpServer::port())
    int io_threads = 2;
    size_t max_body_bytes = 8u << 20;     // larger bodies: 413
    size_t max_header_bytes = 64u << 10;  // larger request heads: 431
    int idle_timeout_s = 300;             // keep-alive connections waiting for a request
    // From a request's first byte to its last. Apart from the idle timeout so that keep-alive
    // clients may wait long between requests while a slowloris (headers or body trickled) loses
    // its connection soon; closed without a reply, as the client is not sending one anyway.
    int request_timeout_s = 60;
    // A write the client takes none of for this long (a reader that stopped reading, with nothing
    // more queued to trip the buffer cap) closes the connection and cancels its request.
    int write_timeout_s = 60;
    // Bytes queued for a connection beyond what the socket took (SSE events of a client that
    // reads slower than it is sent to): over this the connection is closed and its request
    // cancelled, so its pages go back to the pool instead of its events piling up in memory.
    size_t max_write_buffer_bytes = 16u << 20;
    // Open connections beyond this are answered 503 (Retry-After) and closed at once, so a flood of
    // idle or slow clients cannot exhaust file descriptors or memory.
    int max_connections = 4096;
};

class HttpServer {
public:
    HttpServer(App& app, HttpServerOptions opt);
    ~HttpServer();
    Status start();  // binds, listens and starts the I/O threads
    uint16_t port() const;
    // Blocks until SIGINT or SIGTERM (returns true) or until wake() (false; at once when wake()
    // came first). Needs no start().
    bool wait_for_signal();
    // Thread-safe: ends wait_for_signal() (the engine failed for good and the process must exit).
    void wake();
    void stop_accepting();  // closes the listening socket; open connections keep being served
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
