// Expert parallelism on the CPU reference (issue 8): the built-in tiny model (16 experts, top-2,
// a hash-routed layer) run by N in-process ranks (threads + InProcCommunicator), each rank
// owning E/N experts and running its own prompt (data-parallel attention), the routed experts
// going through dispatch -> local experts -> combine. Every rank's logits must match the
// single-rank RefRunner on the same prompt, and greedy continuations must be identical.
//
// Tolerance: the expert-parallel path computes each expert row with the same M=1 GEMMs as the
// local loop and combines in k order, so the logits are expected to be bitwise equal; the test
// allows 1e-5 absolute (float summation-order noise, logits of magnitude ~1) and prints the
// largest difference seen.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>

#include "dist/ep_ref_moe.h"
#include "dist/inproc_communicator.h"
#include "runtime/ref_runner.h"

namespace dsv4::dist {
namespace {

constexpr int kDecodeSteps = 6;
constexpr int64_t kPageTokens = 64;
constexpr int64_t kPages = 48;

struct GenRun {
    std::vector<int32_t> tokens;             // greedy continuation
    std::vector<std::vector<float>> logits;  // prefill's last position, then each decode step
};

std::shared_ptr<const RefModel> tiny_model() {
    static std::shared_ptr<const RefModel> m = [] {
        ModelConfig cfg = tiny_model_config();
        ModelWeights w = ModelWeights::random(cfg, 1234);
        return std::shared_ptr<const RefModel>(std::make_shared<RefModel>(std::move(cfg), std::move(w)));
    }();
    return m;
}

std::vector<int32_t> prompt_for(int i) {
    std::vector<int32_t> p;
    for (int t = 0; t < 5 + 7 * i; ++t) p.push_back(int32_t((1000 + 7919 * (t + 31 * i)) % 129280));
    return p;
}

int32_t argmax(const std::vector<float>& v) {
    return int32_t(std::max_element(v.begin(), v.end()) - v.begin());  // lowest id on ties
}

// Prefill then greedy decode on one runner; opt.routed_moe selects the expert-parallel path.
Status generate(std::shared_ptr<const RefModel> model, const std::vector<int32_t>& prompt, const RefForwardOptions& opt,
                GenRun& out) {
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<RefRunner> runner, RefRunner::create(model, kPageTokens, kPages));
    SimplePagePool pool(kPages);
    std::vector<int32_t> pages, seq = prompt;
    std::vector<float> logits;
    int64_t pos = 0;
    std::vector<int32_t> chunk = prompt;
    for (int step = 0; step <= kDecodeSteps; ++step) {
        if (!pool.grow(pages, runner->kv_layout().pages_for_tokens(pos + int64_t(chunk.size()))))
            return error(StatusCode::kResourceExhausted, "page pool too small");
        SeqChunk c{0, chunk, pos, true, pages};
        DSV4_RETURN_IF_ERROR(runner->forward_seq(c, opt, logits));
        out.logits.push_back(logits);
        pos += int64_t(chunk.size());
        const int32_t next = argmax(logits);
        out.tokens.push_back(next);
        chunk = {next};
    }
    return Status::ok();
}

TEST(EpRefModel, ExpertParallelRanksMatchOneRank) {
    auto model = tiny_model();
    const int E = model->config().n_routed_experts;
    const int max_ranks = 8;
    ASSERT_EQ(E % max_ranks, 0) << "the tiny model's experts must split over 8 ranks";
    std::vector<GenRun> single(max_ranks);
    for (int i = 0; i < max_ranks; ++i) {
        Status s = generate(model, prompt_for(i), RefForwardOptions{}, single[i]);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
    }
    for (int N : {1, 2, 4, 8}) {
        auto ep = ExpertPartition::make(E, N);
        ASSERT_TRUE(ep.is_ok());
        std::vector<GenRun> runs(N);
        std::vector<EpMoeStats> stats(N);
        Status s = run_in_process(N, [&](Communicator& c) -> Status {
            RefForwardOptions opt;
            opt.routed_moe = make_ep_routed_moe(*model, c, *ep, &stats[c.rank()]);
            return generate(model, prompt_for(c.rank()), opt, runs[c.rank()]);
        });
        ASSERT_TRUE(s.is_ok()) << "N " << N << ": " << s.to_string();
        double max_diff = 0;
        for (int r = 0; r < N; ++r) {
            EXPECT_EQ(runs[r].tokens, single[r].tokens) << "N " << N << " rank " << r;
            ASSERT_EQ(runs[r].logits.size(), single[r].logits.size());
            for (size_t step = 0; step < runs[r].logits.size(); ++step)
                for (size_t v = 0; v < runs[r].logits[step].size(); ++v)
                    max_diff =
                        std::max(max_diff, double(std::fabs(runs[r].logits[step][v] - single[r].logits[step][v])));
            if (N > 1) {
                EXPECT_GT(stats[r].remote_rows, 0) << "rank " << r << " sent nothing to its peers";
            }
            // Every routed slot was computed by some rank's experts: sent == received over the group.
        }
        int64_t sent = 0, received = 0;
        for (const EpMoeStats& st : stats) sent += st.sent_rows, received += st.received_rows;
        EXPECT_EQ(sent, received);
        std::printf("[ ep ] N=%d: max |logit diff| vs one rank = %.3g over %d ranks x %d steps; rows sent %lld\n", N,
                    max_diff, N, kDecodeSteps + 1, static_cast<long long>(sent));
        EXPECT_LE(max_diff, 1e-5) << "N " << N;
    }
}

}  // namespace
}  // namespace dsv4::dist
