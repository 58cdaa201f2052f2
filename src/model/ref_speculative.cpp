// Greedy speculative decoding on the CPU reference (see ref_speculative.h).
#include "model/ref_speculative.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {

namespace {

constexpr int64_t kPageTokens = 16;

// One sequence's decode state: its state area, a page pool holding its token pages, the page table.
struct SeqMemory {
    KvLayout layout;
    std::vector<float> state, pool;
    std::vector<int32_t> token_pages;
    SeqStateView view() { return SeqStateView{&layout, state.data(), pool.data(), token_pages}; }
};

Result<SeqMemory> make_memory(const RefModel& m, int mtp_blocks, int64_t max_positions) {
    SeqMemory s;
    DSV4_ASSIGN_OR_RETURN(s.layout, KvLayout::make(m.config(), kPageTokens, 4, KvRowFormat::kF32, mtp_blocks));
    const int64_t pages = (max_positions + kPageTokens - 1) / kPageTokens;
    s.state.assign(size_t(s.layout.state_elems), 0.0f);
    s.pool.assign(size_t(pages * s.layout.page_elems), 0.0f);
    for (int64_t i = 0; i < pages; ++i) s.token_pages.push_back(int32_t(i));
    return s;
}

Status check_args(std::span<const int32_t> prompt, int n_new) {
    if (prompt.empty()) return invalid_argument("empty prompt");
    if (n_new < 1) return invalid_argument("n_new = {} must be at least 1", n_new);
    return Status::ok();
}

}  // namespace

int32_t greedy_token(std::span<const float> row) {
    int32_t best = 0;
    for (size_t i = 1; i < row.size(); ++i)
        if (std::isnan(row[size_t(best)]) ? !std::isnan(row[i]) : row[i] > row[size_t(best)]) best = int32_t(i);
    return best;
}

Result<std::vector<int32_t>> ref_greedy(const RefModel& m, std::span<const int32_t> prompt, int n_new,
                                        std::vector<float>* token_logits) {
    DSV4_RETURN_IF_ERROR(check_args(prompt, n_new));
    const int64_t P = int64_t(prompt.size());
    DSV4_ASSIGN_OR_RETURN(SeqMemory s, make_memory(m, 0, P + n_new));
    std::vector<float> logits;
    if (token_logits) token_logits->clear();
    DSV4_RETURN_IF_ERROR(m.forward(s.view(), prompt, 0, {}, logits));
    std::vector<int32_t> out{greedy_token(logits)};
    if (token_logits) token_logits->insert(token_logits->end(), logits.begin(), logits.end());
    while (int(out.size()) < n_new) {
        const int32_t t = out.back();
        DSV4_RETURN_IF_ERROR(
            m.forward(s.view(), std::span<const int32_t>(&t, 1), P + int64_t(out.size()) - 1, {}, logits));
        out.push_back(greedy_token(logits));
        if (token_logits) token_logits->insert(token_logits->end(), logits.begin(), logits.end());
    }
    return out;
}

Result<std::vector<int32_t>> ref_speculative_greedy(const RefModel& m, std::span<const int32_t> prompt, int n_new,
                                                    const RefSpecOptions& opt, RefSpecStats* stats,
                                                    std::vector<float>* token_logits) {
    DSV4_RETURN_IF_ERROR(check_args(prompt, n_new));
    const int k = opt.k;
    if (k < 1 || k > 8) return invalid_argument("speculative tokens k = {} must be in [1, 8]", k);
    const bool mtp = opt.draft == DraftSource::kMtp;
    if (mtp && m.mtp_blocks() < 1)
        return error(StatusCode::kFailedPrecondition, "MTP drafts need the model's MTP block (mtp.0), which it lacks");
    RefSpecStats local;
    RefSpecStats& st = stats ? *stats : local;
    const ModelConfig& cfg = m.config();
    const int64_t V = cfg.vocab_size, nd = int64_t(cfg.hc_mult) * cfg.hidden_size;
    const int64_t P = int64_t(prompt.size());
    DSV4_ASSIGN_OR_RETURN(SeqMemory s, make_memory(m, mtp ? 1 : 0, P + n_new + k + 1));

    // Prefill; the target's token at position P.
    std::vector<float> logits, streams, mtp_streams;
    RefForwardOptions pre;
    pre.streams_out = &streams;
    DSV4_RETURN_IF_ERROR(m.forward(s.view(), prompt, 0, pre, logits));
    std::vector<int32_t> out{greedy_token(logits)};
    if (token_logits) token_logits->assign(logits.begin(), logits.end());
    int64_t S = P;              // positions 0..S-1 are in the state
    int32_t next = out.back();  // the token at position S
    std::vector<int32_t> drafts(static_cast<size_t>(k));
    // The MTP block over positions first..S-1 (streams rows of those positions, next tokens = the
    // tokens at first+1..S): fills its ring; its logits at S-1 give the first draft (token S+1).
    auto mtp_catch_up = [&](int64_t first, std::span<const float> rows, std::span<const int32_t> next_tokens) {
        RefForwardOptions o;
        o.streams_out = &mtp_streams;
        Status r = m.mtp_forward(0, s.view(), rows, next_tokens, first, o, logits);
        if (r.is_ok()) drafts[0] = greedy_token(logits);
        return r;
    };
    if (mtp) {
        std::vector<int32_t> nt(prompt.begin() + 1, prompt.end());
        nt.push_back(next);
        DSV4_RETURN_IF_ERROR(mtp_catch_up(0, streams, nt));
    }
    std::vector<float> snapshot = s.state;  // positions < S valid
    while (int(out.size()) < n_new) {
        // Drafts d1..dk for positions S+1..S+k.
        if (mtp) {
            // Recursive: the block at S, S+1, ... on its own output streams of the previous position.
            for (int i = 1; i < k; ++i) {
                const std::vector<float> h(mtp_streams.end() - nd, mtp_streams.end());
                RefForwardOptions o;
                o.streams_out = &mtp_streams;
                DSV4_RETURN_IF_ERROR(m.mtp_forward(0, s.view(), h, std::span<const int32_t>(&drafts[size_t(i - 1)], 1),
                                                   S + i - 1, o, logits));
                drafts[size_t(i)] = greedy_token(logits);
            }
        } else {
            int32_t t = next;
            for (int i = 0; i < k; ++i) {
                DSV4_RETURN_IF_ERROR(m.forward(s.view(), std::span<const int32_t>(&t, 1), S + i, {}, logits));
                t = drafts[size_t(i)] = greedy_token(logits);
            }
        }
        if (opt.edit_drafts) opt.edit_drafts(drafts);
        s.state = snapshot;  // undo what drafting wrote at positions >= S
        // Verify: the target over [next, d1..dk] at S..S+k; g_i (logits at S+i) is its token S+i+1.
        std::vector<int32_t> chunk{next};
        chunk.insert(chunk.end(), drafts.begin(), drafts.end());
        RefForwardOptions vo;
        vo.all_logits = true;
        vo.streams_out = &streams;
        DSV4_RETURN_IF_ERROR(m.forward(s.view(), chunk, S, vo, logits));
        int j = 0;
        int32_t g = greedy_token(std::span<const float>(logits).first(size_t(V)));
        while (j < k && drafts[size_t(j)] == g) {
            ++j;
            g = greedy_token(std::span<const float>(logits).subspan(size_t(j) * V, size_t(V)));
        }
        ++st.verify_steps;
        st.drafted += k;
        st.accepted += j;
        for (int i = 0; i < j; ++i) out.push_back(drafts[size_t(i)]);
        out.push_back(g);
        if (token_logits) token_logits->insert(token_logits->end(), logits.begin(), logits.begin() + (j + 1) * V);
        // Positions S..S+j hold accepted tokens; S+j+1..S+k were written for rejected drafts.
        const std::span<const int32_t> kept(chunk.data(), size_t(j) + 1);
        if (j < k) {
            ++st.rollbacks;
            s.state = snapshot;
            RefForwardOptions ro;
            ro.want_logits = false;
            ro.streams_out = &streams;
            DSV4_RETURN_IF_ERROR(m.forward(s.view(), kept, S, ro, logits));
        }
        if (mtp) {
            std::vector<int32_t> nt(kept.begin() + 1, kept.end());
            nt.push_back(g);
            DSV4_RETURN_IF_ERROR(mtp_catch_up(S, std::span<const float>(streams).first(size_t(j + 1) * nd), nt));
        }
        S += j + 1;
        next = g;
        snapshot = s.state;
    }
    out.resize(size_t(n_new));
    if (token_logits) token_logits->resize(size_t(n_new) * size_t(V));
    return out;
}

}  // namespace dsv4
