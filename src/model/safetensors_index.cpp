// model.safetensors.index.json parser (see safetensors_index.h).
#include "model/safetensors_index.h"

#include <filesystem>

#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

// Shard names in an index are file names relative to its directory; refuse anything that could
// point outside it, that names a directory ("." or a trailing "/"), or whose C string would name
// another file.
bool safe_relative(const std::string& name) {
    if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return false;
    const std::filesystem::path p(name);
    for (const auto& part : p)
        if (part == "..") return false;
    const std::filesystem::path norm = p.lexically_normal();
    return norm.has_filename() && norm.filename() != ".";
}

}  // namespace

Result<SafetensorsIndex> parse_safetensors_index(std::string_view text, const std::string& where) {
    using nlohmann::json;
    const json idx = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (idx.is_discarded() || !idx.is_object())
        return error(StatusCode::kDataLoss, "{}: not a valid JSON object", where);
    const auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object())
        return error(StatusCode::kDataLoss, "{}: missing 'weight_map' object", where);
    SafetensorsIndex out;
    for (const auto& [name, shard] : wm->items()) {
        if (!shard.is_string())
            return error(StatusCode::kDataLoss, "{}: tensor '{}': shard is not a string", where, name);
        const auto& s = shard.get_ref<const std::string&>();
        // The name is quoted as JSON: it may hold a NUL or control bytes.
        if (!safe_relative(s))
            return error(StatusCode::kDataLoss, "{}: tensor '{}': shard {} is not a file name in its directory", where,
                         name, shard.dump(-1, ' ', false, json::error_handler_t::replace));
        out.shards[s].push_back(name);  // items() iterates in sorted key order
    }
    if (const auto md = idx.find("metadata"); md != idx.end() && md->is_object()) {
        out.metadata.emplace();
        for (const auto& [k, v] : md->items()) (*out.metadata)[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    return out;
}

}  // namespace dsv4
