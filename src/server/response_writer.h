// ResponseWriter: what request handlers need from an HTTP connection, without Beast types, so
// the OpenAI logic compiles and is tested apart from the socket code. Everything except post()
// must be called on the connection's executor (post() gets you there from any thread).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dsv4 {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class ResponseWriter {
public:
    virtual ~ResponseWriter() = default;
    virtual void post(std::function<void()> fn) = 0;
    // A complete response.
    virtual void send(int status, const std::string& content_type, std::string body, const HeaderList& extra = {}) = 0;
    // Server-sent events: headers first, then data pieces, then the end.
    virtual void start_stream() = 0;
    virtual void stream_data(std::string data) = 0;
    virtual void end_stream() = 0;
    // `fn` runs (on the executor) if the client goes away before the response ends.
    virtual void on_disconnect(std::function<void()> fn) = 0;
};

}  // namespace dsv4
