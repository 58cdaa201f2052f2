// load_generation_defaults (generation_defaults.h).
#include "server/generation_defaults.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsv4 {

Result<GenerationDefaults> load_generation_defaults(const std::string& dir) {
    GenerationDefaults d;
    const std::filesystem::path file = std::filesystem::path(dir) / "generation_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) return d;
    std::ifstream in(file);
    if (!in) return invalid_argument("{}: cannot be read", file.string());
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument("{}: not a JSON object", file.string());
    std::string applied;
    auto note = [&](const char* key, const std::string& v) {
        applied += fmt::format("{}{} {}", applied.empty() ? "" : ", ", key, v);
    };
    // A number in [lo, hi] (lo excluded when lo_open); absent or null: untouched.
    auto number = [&](const char* key, double lo, double hi, bool lo_open, float& out) -> Status {
        if (!j.contains(key) || j[key].is_null()) return Status::ok();
        if (!j[key].is_number()) return invalid_argument("{}: '{}' must be a number", file.string(), key);
        const double v = j[key].get<double>();
        if (!(lo_open ? v > lo : v >= lo) || !(v <= hi))
            return invalid_argument("{}: '{}' = {} is outside {}{}, {}]", file.string(), key, v, lo_open ? "(" : "[",
                                    lo, hi);
        out = float(v);
        note(key, fmt::format("{}", v));
        return Status::ok();
    };
    DSV4_RETURN_IF_ERROR(number("temperature", 0.0, 2.0, false, d.params.temperature));
    DSV4_RETURN_IF_ERROR(number("top_p", 0.0, 1.0, true, d.params.top_p));
    DSV4_RETURN_IF_ERROR(number("min_p", 0.0, 1.0, false, d.params.min_p));
    DSV4_RETURN_IF_ERROR(number("repetition_penalty", 0.0, 2.0, true, d.params.repetition_penalty));
    auto integer = [&](const char* key, int64_t lo, int64_t& out) -> Status {
        out = -2;
        if (!j.contains(key) || j[key].is_null()) return Status::ok();
        if (!j[key].is_number_integer()) return invalid_argument("{}: '{}' must be an integer", file.string(), key);
        const int64_t v = j[key].get<int64_t>();
        if (v < lo || v > (int64_t(1) << 30))
            return invalid_argument("{}: '{}' = {} is outside [{}, 2^30]", file.string(), key, v, lo);
        out = v;
        note(key, std::to_string(v));
        return Status::ok();
    };
    int64_t v = 0;
    DSV4_RETURN_IF_ERROR(integer("top_k", -1, v));
    if (v != -2) d.params.top_k = v < 0 ? 0 : int(v);
    DSV4_RETURN_IF_ERROR(integer("max_new_tokens", 1, v));
    if (v != -2) d.max_tokens = v;
    if (!applied.empty()) d.summary = file.string() + ": " + applied;
    return d;
}

}  // namespace dsv4
