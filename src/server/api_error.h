// ApiError: an OpenAI-style error reply ({"error": {"message", "type", "param", "code"}}) with
// its HTTP status. Messages never echo request bodies, so error replies stay small (B27).
#pragma once

#include <string>

namespace dsv4 {

struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // empty -> null
    std::string code;   // empty -> null

    std::string body() const;  // JSON text
};

inline ApiError bad_request(std::string msg, std::string param = {}) {
    return ApiError{400, std::move(msg), "invalid_request_error", std::move(param), {}};
}

}  // namespace dsv4
