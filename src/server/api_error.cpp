// ApiError::body (api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace dsv4 {

std::string ApiError::body() const {
    using json = nlohmann::json;
    json e = {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}};
    return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace dsv4
