// libFuzzer target for model.safetensors.index.json (src/model/safetensors_index.h), issue 21 item 2:
// any byte string is a candidate index. Invariants (a violation traps):
//  - the parser returns an index or a DataLoss status whose message starts with the index path;
//  - an accepted index's shard names are relative file names inside the checkpoint directory (not
//    empty, not absolute, no ".." component, no NUL), and the directory joined with one names a
//    file inside it (not the directory itself); every shard lists at least one tensor, sorted, and
//    no tensor is listed twice;
//  - the number of tensors equals the number of weight_map entries;
//  - round trip: the index written back as JSON (weight_map from the shard lists, metadata as
//    strings) parses to the same index.
// Built only with -DDSV4_FUZZ=ON and clang.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/safetensors_index.h"

namespace {

void check(bool ok) {
    if (!ok) __builtin_trap();
}

const std::string kWhere = "/ckpt/model.safetensors.index.json";

bool inside_dir(const std::string& shard) {
    const std::filesystem::path p = (std::filesystem::path("/ckpt") / shard).lexically_normal();
    const std::string s = p.string();
    return s.starts_with("/ckpt/") && s.back() != '/' && p.filename() != ".";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto r = dsv4::parse_safetensors_index(text, kWhere);
    if (!r.is_ok()) {
        check(r.status().code() == dsv4::StatusCode::kDataLoss);
        check(r.status().message().starts_with(kWhere + ": "));
        return 0;
    }
    const dsv4::SafetensorsIndex& idx = *r;
    std::set<std::string> seen;
    size_t n = 0;
    for (const auto& [shard, names] : idx.shards) {
        check(!shard.empty() && shard.front() != '/' && shard.find('\0') == std::string::npos);
        for (const auto& part : std::filesystem::path(shard)) check(part != "..");
        check(inside_dir(shard));
        check(!names.empty() && std::is_sorted(names.begin(), names.end()));
        for (const auto& name : names) check(seen.insert(name).second);
        n += names.size();
    }
    const auto j = nlohmann::json::parse(text);  // accepted, so valid JSON
    check(n == j.at("weight_map").size());

    nlohmann::json out = {{"weight_map", nlohmann::json::object()}};
    for (const auto& [shard, names] : idx.shards)
        for (const auto& name : names) out["weight_map"][name] = shard;
    if (idx.metadata) out["metadata"] = *idx.metadata;
    auto again = dsv4::parse_safetensors_index(out.dump(), kWhere);
    check(again.is_ok() && again->shards == idx.shards && again->metadata == idx.metadata);
    return 0;
}
