// Added tokens (special and not): matched in the raw text before pre-tokenization, leftmost and
// longest first, in two passes like the reference: tokens with normalized=false on the raw text,
// then tokens with normalized=true on what is left (the normalizer is the identity here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace dsv4 {

class BpeModel;

struct AddedTokenSpec {
    int32_t id = -1;
    std::string content;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool single_word = false;
};

// A run of the input: either plain text (id < 0) to pre-tokenize, or one added token.
struct TextSegment {
    uint32_t begin;
    uint32_t end;
    int32_t id;
};

class AddedVocab {
public:
    // Validates ids the way the reference assigns them: a token already in the model vocab
    // keeps that id, a new one gets the next id after the vocab and the previous added tokens.
    static Result<AddedVocab> create(const std::vector<AddedTokenSpec>& tokens, const BpeModel& model);

    // Cuts `text` into plain and added-token segments (empty plain segments are omitted).
    void split(std::string_view text, std::vector<TextSegment>& out) const;

    std::optional<int32_t> token_to_id(std::string_view content) const;
    // nullptr when `id` is not an added token.
    const AddedTokenSpec* find(int32_t id) const;
    int32_t max_id() const { return max_id_; }

private:
    // Byte trie over token contents; node 0 is the root.
    struct Trie {
        struct Node {
            std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
            int32_t token = -1;                                 // index into tokens_
        };
        std::vector<Node> nodes{Node{}};
        void insert(std::string_view key, int32_t token);
        // Longest token that starts at text[pos], or -1.
        int32_t longest_at(std::string_view text, size_t pos, size_t& len) const;
        bool empty() const { return nodes.size() == 1; }
    };

    // Appends matches of `trie` in text[begin, end) (plain gaps included) to `out`.
    void find_matches(const Trie& trie, std::string_view text, uint32_t begin, uint32_t end,
                      std::vector<TextSegment>& out) const;

    std::vector<AddedTokenSpec> tokens_;
    std::unordered_map<std::string, int32_t> by_content_;  // content -> index into tokens_
    std::unordered_map<int32_t, int32_t> by_id_;           // id -> index into tokens_
    Trie raw_trie_;                                        // normalized == false
    Trie normalized_trie_;                                 // normalized == true
    int32_t max_id_ = -1;
};

}  // namespace dsv4
