#include "core/status.h"

namespace dsv4 {

const char* status_code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk:
            return "OK";
        case StatusCode::kInvalidArgument:
            return "INVALID_ARGUMENT";
        case StatusCode::kNotFound:
            return "NOT_FOUND";
        case StatusCode::kOutOfRange:
            return "OUT_OF_RANGE";
        case StatusCode::kFailedPrecondition:
            return "FAILED_PRECONDITION";
        case StatusCode::kResourceExhausted:
            return "RESOURCE_EXHAUSTED";
        case StatusCode::kDataLoss:
            return "DATA_LOSS";
        case StatusCode::kUnimplemented:
            return "UNIMPLEMENTED";
        case StatusCode::kInternal:
            return "INTERNAL";
        case StatusCode::kUnavailable:
            return "UNAVAILABLE";
        case StatusCode::kDeviceLost:
            return "DEVICE_LOST";
    }
    return "UNKNOWN";
}

std::string Status::to_string() const {
    if (is_ok()) return "OK";
    return fmt::format("{}: {}", status_code_name(code_), message_);
}

Status Status::with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
}

}  // namespace dsv4
