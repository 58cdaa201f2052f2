#include "dist/dispatch_plan.h"

#include <algorithm>

namespace dsv4::dist {

Result<DispatchPlan> plan_dispatch(std::span<const int32_t> ids, int64_t n_tokens, int k, const ExpertPartition& ep) {
    if (k < 1) return invalid_argument("top-k must be at least 1, got {}", k);
    if (n_tokens < 0) return invalid_argument("negative token count {}", n_tokens);
    if (int64_t(ids.size()) != n_tokens * k)
        return invalid_argument("expert ids hold {} entries, expected tokens {} x k {}", ids.size(), n_tokens, k);
    const int E = ep.n_experts(), N = ep.n_ranks(), nl = ep.n_local();
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= E)
            return error(StatusCode::kOutOfRange, "expert id {} of token {} slot {} is outside [0, {})", ids[i],
                         int64_t(i) / k, int64_t(i) % k, E);
    DispatchPlan p;
    p.n_ranks = N;
    p.n_local = nl;
    p.k = k;
    p.n_tokens = n_tokens;
    // Counting sort of the used slots by global expert id (= by destination, then local expert).
    std::vector<int64_t> per_expert(size_t(E), 0);
    for (int32_t e : ids)
        if (e >= 0) ++per_expert[e];
    std::vector<int64_t> start(size_t(E) + 1, 0);
    for (int e = 0; e < E; ++e) start[e + 1] = start[e] + per_expert[e];
    const int64_t S = start[E];
    p.send_slot.resize(static_cast<size_t>(S));
    p.send_token.resize(static_cast<size_t>(S));
    p.send_local_expert.resize(static_cast<size_t>(S));
    p.slot_row.assign(ids.size(), -1);
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t slot = 0; slot < int64_t(ids.size()); ++slot) {
        const int32_t e = ids[slot];
        if (e < 0) continue;
        const int64_t row = next[e]++;
        p.send_slot[row] = slot;
        p.send_token[row] = slot / k;
        p.send_local_expert[row] = ep.local_index(e);
        p.slot_row[slot] = row;
    }
    p.send_expert_counts.assign(per_expert.begin(), per_expert.end());  // [N, n_local] = [E]
    p.send_counts.assign(size_t(N), 0);
    p.send_offsets.assign(size_t(N), 0);
    for (int r = 0; r < N; ++r) {
        p.send_offsets[r] = start[size_t(r) * nl];
        p.send_counts[r] = start[size_t(r + 1) * nl] - start[size_t(r) * nl];
    }
    return p;
}

Result<ReceiveLayout> plan_receive(std::span<const int64_t> counts, int n_ranks, int n_local) {
    if (n_ranks < 1 || n_local < 1)
        return invalid_argument("ranks {} and local experts {} must be positive", n_ranks, n_local);
    if (int64_t(counts.size()) != int64_t(n_ranks) * n_local)
        return invalid_argument("received expert counts hold {} entries, expected ranks {} x local experts {}",
                                counts.size(), n_ranks, n_local);
    for (size_t i = 0; i < counts.size(); ++i)
        if (counts[i] < 0)
            return invalid_argument("negative row count {} from rank {} for local expert {}", counts[i],
                                    int64_t(i) / n_local, int64_t(i) % n_local);
    ReceiveLayout L;
    L.n_ranks = n_ranks;
    L.n_local = n_local;
    L.recv_counts.assign(size_t(n_ranks), 0);
    L.recv_offsets.assign(size_t(n_ranks), 0);
    L.expert_counts.assign(size_t(n_local), 0);
    L.expert_offsets.assign(size_t(n_local), 0);
    for (int s = 0; s < n_ranks; ++s)
        for (int e = 0; e < n_local; ++e) {
            L.recv_counts[s] += counts[size_t(s) * n_local + e];
            L.expert_counts[e] += counts[size_t(s) * n_local + e];
        }
    for (int s = 1; s < n_ranks; ++s) L.recv_offsets[s] = L.recv_offsets[s - 1] + L.recv_counts[s - 1];
    for (int e = 1; e < n_local; ++e) L.expert_offsets[e] = L.expert_offsets[e - 1] + L.expert_counts[e - 1];
    const int64_t R = L.recv_offsets[n_ranks - 1] + L.recv_counts[n_ranks - 1];
    L.recv_to_expert.resize(static_cast<size_t>(R));
    L.expert_to_recv.resize(static_cast<size_t>(R));
    // Walk sources in rank order: within each expert, rows land source by source, in order.
    std::vector<int64_t> next(L.expert_offsets);
    int64_t row = 0;
    for (int s = 0; s < n_ranks; ++s)
        for (int e = 0; e < n_local; ++e)
            for (int64_t i = 0; i < counts[size_t(s) * n_local + e]; ++i, ++row) {
                const int64_t dst = next[e]++;
                L.recv_to_expert[row] = dst;
                L.expert_to_recv[dst] = row;
            }
    return L;
}

template <typename T>
void gather_rows(const T* src, std::span<const int64_t> index, int64_t width, T* dst) {
    for (size_t i = 0; i < index.size(); ++i) std::copy_n(src + index[i] * width, width, dst + int64_t(i) * width);
}

template <typename T>
void scatter_rows(const T* src, std::span<const int64_t> index, int64_t width, T* dst) {
    for (size_t i = 0; i < index.size(); ++i) std::copy_n(src + int64_t(i) * width, width, dst + index[i] * width);
}

template void gather_rows<float>(const float*, std::span<const int64_t>, int64_t, float*);
template void scatter_rows<float>(const float*, std::span<const int64_t>, int64_t, float*);
template void gather_rows<int64_t>(const int64_t*, std::span<const int64_t>, int64_t, int64_t*);
template void scatter_rows<int64_t>(const int64_t*, std::span<const int64_t>, int64_t, int64_t*);

void combine_rows(const float* returned, const DispatchPlan& p, int64_t width, float* out) {
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        float* o = out + t * width;
        for (int k = 0; k < p.k; ++k) {
            const int64_t row = p.slot_row[size_t(t * p.k + k)];
            if (row < 0) continue;
            const float* r = returned + row * width;
            for (int64_t c = 0; c < width; ++c) o[c] += r[c];
        }
    }
}

}  // namespace dsv4::dist
