#include "dist/ep_moe.h"

#include <vector>

#include "dist/dispatch_plan.h"

namespace dsv4::dist {

namespace {
std::vector<int64_t> scaled(const std::vector<int64_t>& v, int64_t f) {
    std::vector<int64_t> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = v[i] * f;
    return r;
}
}  // namespace

Status ep_routed_moe(Communicator& comm, const ExpertPartition& ep, int d, int64_t T, int K,
                     std::span<const int32_t> ids, std::span<const float> weights, const float* x,
                     const LocalExpertFn& run_expert, float* out, EpMoeStats* stats) {
    const int N = comm.size(), me = comm.rank(), nl = ep.n_local();
    if (ep.n_ranks() != N)
        return invalid_argument("expert partition over {} ranks used with a communicator of {}", ep.n_ranks(), N);
    Result<DispatchPlan> planned = plan_dispatch(ids, T, K, ep);
    if (planned.is_ok() && int64_t(weights.size()) != T * K)
        planned = invalid_argument("routing weights hold {} entries, expected {} x {}", weights.size(), T, K);
    // 1. Row counts per (destination, local expert); -1 everywhere tells the peers this rank failed.
    std::vector<int64_t> header =
        planned.is_ok() ? planned->send_expert_counts : std::vector<int64_t>(size_t(N) * nl, -1);
    std::vector<int64_t> header_in(size_t(N) * nl);
    std::vector<int64_t> hc(size_t(N), nl), ho(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) ho[r] = int64_t(r) * nl;
    DSV4_RETURN_IF_ERROR(comm.all_to_all_v(header.data(), hc, ho, header_in.data(), hc, ho, CommDtype::kI64));
    if (!planned.is_ok()) return planned.status();
    Result<ReceiveLayout> laid = plan_receive(header_in, N, nl);
    if (!laid.is_ok())
        return error(StatusCode::kFailedPrecondition, "expert-parallel MoE: a peer rank failed its dispatch ({})",
                     laid.status().message());
    const DispatchPlan& p = *planned;
    const ReceiveLayout& L = *laid;

    // 2. Rows and weights out, in send order.
    const int64_t S = p.n_send(), R = L.n_recv();
    std::vector<float> send(size_t(S) * d), send_w(static_cast<size_t>(S)), recv(size_t(R) * d),
        recv_w(static_cast<size_t>(R));
    gather_rows(x, p.send_token, d, send.data());
    gather_rows(weights.data(), p.send_slot, 1, send_w.data());
    DSV4_RETURN_IF_ERROR(comm.all_to_all_v(send.data(), scaled(p.send_counts, d), scaled(p.send_offsets, d),
                                           recv.data(), scaled(L.recv_counts, d), scaled(L.recv_offsets, d),
                                           CommDtype::kF32));
    DSV4_RETURN_IF_ERROR(comm.all_to_all_v(send_w.data(), p.send_counts, p.send_offsets, recv_w.data(), L.recv_counts,
                                           L.recv_offsets, CommDtype::kF32));

    // 3. Expert-major order, one block per local expert.
    std::vector<float> rows(size_t(R) * d), rows_w(static_cast<size_t>(R)), rows_out(size_t(R) * d, 0.0f);
    scatter_rows(recv.data(), L.recv_to_expert, d, rows.data());
    scatter_rows(recv_w.data(), L.recv_to_expert, 1, rows_w.data());
    Status expert_status = Status::ok();
    for (int e = 0; e < nl && expert_status.is_ok(); ++e) {
        const int64_t n = L.expert_counts[e], o = L.expert_offsets[e];
        if (n > 0) expert_status = run_expert(e, &rows[size_t(o) * d], &rows_w[size_t(o)], n, &rows_out[size_t(o) * d]);
    }
    // An expert failure still takes part in the return exchange (peers are waiting for it).
    // 4. Back to receive order, reverse exchange, combine in k order.
    gather_rows(rows_out.data(), L.recv_to_expert, d, recv.data());  // recv[i] = rows_out[recv_to_expert[i]]
    DSV4_RETURN_IF_ERROR(comm.all_to_all_v(recv.data(), scaled(L.recv_counts, d), scaled(L.recv_offsets, d),
                                           send.data(), scaled(p.send_counts, d), scaled(p.send_offsets, d),
                                           CommDtype::kF32));
    DSV4_RETURN_IF_ERROR(expert_status);
    combine_rows(send.data(), p, d, out);
    if (stats) {
        stats->sent_rows += S;
        stats->received_rows += R;
        stats->remote_rows += S - p.send_counts[me];
    }
    return Status::ok();
}

}  // namespace dsv4::dist
