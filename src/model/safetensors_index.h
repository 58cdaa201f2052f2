// model.safetensors.index.json: which shard file of a sharded checkpoint holds each tensor (spec §4).
// The parser treats its input as hostile (it is fuzzed: tests/fuzz/safetensors_index_fuzz.cpp): it
// never throws, and an accepted index satisfies
//   * the text is a JSON object with a "weight_map" object of tensor name -> shard file name;
//   * every shard name is a relative file name inside the checkpoint directory: not empty, not
//     absolute, no ".." component, no NUL byte, not a directory ("." or a trailing "/");
//   * each tensor is listed under exactly one shard (JSON object keys are unique), and each shard's
//     list is sorted;
//   * "metadata", when it is an object, gives its string values as they are and any other value as
//     its JSON text (HF writes {"total_size": N}).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsv4 {

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

struct SafetensorsIndex {
    std::map<std::string, std::vector<std::string>> shards;      // shard file -> its tensor names, sorted
    std::optional<std::map<std::string, std::string>> metadata;  // when "metadata" is an object
};

// Errors: DataLoss, the message starting with `where` (the index path) and naming the tensor and
// shard involved.
Result<SafetensorsIndex> parse_safetensors_index(std::string_view text, const std::string& where);

}  // namespace dsv4
