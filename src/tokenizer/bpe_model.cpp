// BPE merge loop. The lowest-ranked adjacent pair is merged first, leftmost on ties; this is
// the order the reference uses, so both loops below produce its exact output.
#include "tokenizer/bpe_model.h"

#include <climits>
#include <queue>

namespace dsv4 {
namespace {
const std::string kEmptyToken;
constexpr size_t kQuadraticMaxSymbols = 128;
}  // namespace

Result<BpeModel> BpeModel::create(const BpeSpec& spec) {
    BpeModel m;
    m.ignore_merges_ = spec.ignore_merges;
    int64_t max_id = -1;
    m.token_to_id_.reserve(spec.vocab.size());
    for (const auto& [tok, id] : spec.vocab) {
        if (id < 0) return invalid_argument("tokenizer.json: vocab token {:?} has negative id {}", tok, id);
        if (!m.token_to_id_.emplace(tok, id).second) {
            return invalid_argument("tokenizer.json: vocab token {:?} appears twice", tok);
        }
        max_id = std::max<int64_t>(max_id, id);
    }
    if (max_id >= (int64_t{1} << 30)) return invalid_argument("tokenizer.json: vocab id {} is too large", max_id);
    m.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
    std::vector<bool> seen(static_cast<size_t>(max_id + 1), false);
    for (const auto& [tok, id] : spec.vocab) {
        if (seen[static_cast<size_t>(id)]) return invalid_argument("tokenizer.json: vocab id {} is used twice", id);
        seen[static_cast<size_t>(id)] = true;
        m.id_to_token_[static_cast<size_t>(id)] = tok;
    }
    if (spec.unk_token) {
        auto it = m.token_to_id_.find(*spec.unk_token);
        if (it == m.token_to_id_.end()) {
            return invalid_argument("tokenizer.json: unk_token {:?} is not in the vocab", *spec.unk_token);
        }
        m.unk_id_ = it->second;
    }
    for (int b = 0; b < 256; ++b) {
        auto it = m.token_to_id_.find(std::string(m.alphabet_.utf8_of(static_cast<uint8_t>(b))));
        m.byte_id_[b] = it == m.token_to_id_.end() ? -1 : it->second;
    }
    m.merges_.reserve(spec.merges.size());
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
        const auto& [a, b] = spec.merges[rank];
        auto ia = m.token_to_id_.find(a);
        auto ib = m.token_to_id_.find(b);
        auto ic = m.token_to_id_.find(a + b);
        if (ia == m.token_to_id_.end() || ib == m.token_to_id_.end() || ic == m.token_to_id_.end()) {
            return invalid_argument("tokenizer.json: merge #{} ({:?} {:?}) uses a token missing from the vocab", rank,
                                    a, b);
        }
        m.merges_.insert(ia->second, ib->second, MergeEntry{static_cast<int32_t>(rank), ic->second});
    }
    return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    auto it = token_to_id_.find(std::string(token));
    if (it == token_to_id_.end()) return std::nullopt;
    return it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return kEmptyToken;
    return id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::merge_quadratic(std::vector<int32_t>& ids) const {
    // rank[i] is the rank of pair (ids[i], ids[i+1]); only neighbours change after a merge.
    const size_t n0 = ids.size();
    if (n0 < 2) return;
    std::vector<int32_t> rank(n0 - 1);
    std::vector<int32_t> merged(n0 - 1);
    auto fill = [&](size_t i) {
        const MergeEntry* e = merges_.find(ids[i], ids[i + 1]);
        rank[i] = e ? e->rank : INT32_MAX;
        merged[i] = e ? e->new_id : -1;
    };
    for (size_t i = 0; i + 1 < n0; ++i) fill(i);
    size_t n = n0;
    while (n >= 2) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; ++i) {
            if (rank[i] < rank[best]) best = i;
        }
        if (rank[best] == INT32_MAX) break;
        ids[best] = merged[best];
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(best));
        merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(best));
        --n;
        if (best + 1 < n) fill(best);
        if (best > 0) fill(best - 1);
    }
}

void BpeModel::merge_heap(std::vector<int32_t>& ids) const {
    // Symbols form a linked list; heap entries are validated lazily when popped.
    const int n = static_cast<int>(ids.size());
    if (n < 2) return;
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
        int32_t rank;
        int left;
        int32_t left_id, right_id;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
    auto consider = [&](int left) {
        if (left < 0 || next[left] < 0) return;
        const int right = next[left];
        if (const MergeEntry* e = merges_.find(ids[left], ids[right]))
            heap.push({e->rank, left, ids[left], ids[right]});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);
    std::vector<bool> dead(n, false);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        if (dead[c.left] || next[c.left] < 0) continue;
        const int right = next[c.left];
        if (ids[c.left] != c.left_id || ids[right] != c.right_id) continue;
        ids[c.left] = merges_.find(c.left_id, c.right_id)->new_id;
        dead[right] = true;
        next[c.left] = next[right];
        if (next[right] >= 0) prev[next[right]] = c.left;
        consider(prev[c.left]);
        consider(c.left);
    }
    size_t w = 0;
    for (int i = 0; i >= 0 && i < n; i = next[i]) ids[w++] = ids[i];
    ids.resize(w);
}

void BpeModel::encode_uncached(std::string_view bytes, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        std::string as_chars;
        for (char c : bytes) as_chars.append(alphabet_.utf8_of(static_cast<uint8_t>(c)));
        if (auto it = token_to_id_.find(as_chars); it != token_to_id_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    std::vector<int32_t> ids;
    ids.reserve(bytes.size());
    for (char c : bytes) {
        const int32_t id = byte_id_[static_cast<uint8_t>(c)];
        if (id >= 0)
            ids.push_back(id);
        else if (unk_id_)
            ids.push_back(*unk_id_);
        // Without an unk token the reference silently drops symbols missing from the vocab.
    }
    if (ids.size() <= kQuadraticMaxSymbols)
        merge_quadratic(ids);
    else
        merge_heap(ids);
    out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
    if (bytes.size() == 1) {
        const int32_t id = byte_id_[static_cast<uint8_t>(bytes[0])];
        if (id >= 0)
            out.push_back(id);
        else if (unk_id_)
            out.push_back(*unk_id_);
        return;
    }
    if (bytes.size() > kMaxCachedWordBytes) {
        encode_uncached(bytes, out);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(cache_->mu);
        if (auto it = cache_->words.find(bytes); it != cache_->words.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t start = out.size();
    encode_uncached(bytes, out);
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (cache_->words.size() < kCacheCapacity) {
        cache_->words.emplace(std::string(bytes),
                              std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(start), out.end()));
    }
}

}  // namespace dsv4
