// The BPE model of a byte-level tokenizer: vocabulary, ranked merges and the merge loop that
// turns one pre-tokenized word (raw bytes) into ids. Words are cached because natural text
// repeats them constantly.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/merge_table.h"

namespace dsv4 {

struct BpeSpec {
    std::vector<std::pair<std::string, int32_t>> vocab;       // token -> id
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
    std::optional<std::string> unk_token;
    bool ignore_merges = false;
};

class BpeModel {
public:
    static Result<BpeModel> create(const BpeSpec& spec);

    // Appends the ids of one word given as raw bytes (the byte-level mapping is implicit).
    void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

    // Merge loops exposed for tests: quadratic scan (short words) and heap (long words).
    void merge_quadratic(std::vector<int32_t>& ids) const;
    void merge_heap(std::vector<int32_t>& ids) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    // "" when the id is not in the vocabulary.
    const std::string& id_to_token(int32_t id) const;
    // One past the largest id.
    int64_t id_limit() const { return static_cast<int64_t>(id_to_token_.size()); }
    size_t size() const { return token_to_id_.size(); }

private:
    // Transparent hash: lookups take the word as a string_view without building a key.
    struct WordHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    struct Cache {
        std::mutex mu;
        std::unordered_map<std::string, std::vector<int32_t>, WordHash, std::equal_to<>> words;
    };
    static constexpr size_t kCacheCapacity = 1 << 18;   // words; inserts stop when full
    static constexpr size_t kMaxCachedWordBytes = 256;  // long words are rare and costly to key

    void encode_uncached(std::string_view bytes, std::vector<int32_t>& out) const;

    ByteLevelAlphabet alphabet_;
    std::unordered_map<std::string, int32_t> token_to_id_;
    std::vector<std::string> id_to_token_;
    std::array<int32_t, 256> byte_id_{};  // id of each single-byte token, -1 if missing
    MergeTable merges_;
    std::optional<int32_t> unk_id_;
    bool ignore_merges_ = false;
    std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace dsv4
