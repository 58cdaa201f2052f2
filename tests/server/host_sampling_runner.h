// HostSamplingRunner: wraps any ModelRunner and answers DeviceSample::kGreedy and kFull rows
// itself, on the host, as a device sampler would (tests of the engine's device-sampling and
// overlapped-scheduling paths without a GPU). kFull rows are rebuilt into SamplingParams and a
// PenaltyState from their flattened DeviceSampleParams and given to sample_token, the reference,
// so a row that reached the runner with the wrong parameters or penalty counts changes the output.
// It also counts the chunk tokens that arrived as kPendingToken (resolved by ModelRunner::launch).
#pragma once

#include <algorithm>
#include <map>
#include <vector>

#include "runtime/model_runner.h"
#include "sample/sampler.h"

namespace dsv4::test {

class HostSamplingRunner final : public ModelRunner {
public:
    explicit HostSamplingRunner(ModelRunner& inner) : inner_(inner) {}
    const ModelConfig& config() const override { return inner_.config(); }
    const KvLayout& kv_layout() const override { return inner_.kv_layout(); }
    int64_t n_pages() const override { return inner_.n_pages(); }
    int64_t max_positions() const override { return inner_.max_positions(); }
    Status forward(const ForwardBatch& b, std::vector<std::vector<float>>& logits) override {
        return inner_.forward(b, logits);
    }
    bool supports_device_sample(DeviceSample) const override { return true; }
    int max_draft_tokens() const override { return inner_.max_draft_tokens(); }
    Status launch(const ForwardBatch& b) override {
        for (const auto& c : b.seqs) pending_seen += std::count(c.tokens.begin(), c.tokens.end(), kPendingToken);
        return ModelRunner::launch(b);
    }
    Status forward_sampled(const ForwardBatch& b, StepOutput& out) override {
        out = StepOutput{};
        ForwardBatch rows = b;  // the inner runner returns every row's logits (and a verify chunk's drafts)
        for (auto& c : rows.seqs) c.sample = DeviceSample::kNone;
        StepOutput all;
        DSV4_RETURN_IF_ERROR(inner_.forward_sampled(rows, all));
        out.drafts = all.drafts;
        size_t r = 0;
        for (const auto& c : b.seqs) {
            if (!c.want_logits) continue;
            for (int j = 0; j <= c.draft_tokens; ++j) {  // a verify chunk's k + 1 rows, else one
                auto& row = all.logits[r++];
                if (echo_bonus != 0.0f && c.draft_tokens == 0) row[size_t(c.tokens.back())] += echo_bonus;
                if (c.sample == DeviceSample::kNone) {
                    out.logits.push_back(std::move(row));
                    continue;
                }
                ++device_rows[c.seq_id];
                verify_rows += c.draft_tokens > 0;
                // kFull verify rows: row j sampled at position + j, as the CUDA runner's sampler does
                // (the engine keeps draft j iff it is the row's token).
                SampleResult s = c.sample == DeviceSample::kGreedy ? greedy(row) : full(row, c.params, j);
                out.tokens.push_back(s.token);
                out.logprobs.push_back(s.logprob);
                std::vector<std::pair<int32_t, float>> top;
                for (const auto& e : s.top) top.emplace_back(e.token, e.logprob);
                out.top_logprobs.push_back(std::move(top));
            }
        }
        return Status::ok();
    }

    std::map<int64_t, int> device_rows;  // seq_id -> rows sampled here
    // Added to the logit of each row's input token: a model that likes to repeat itself, so that
    // the penalties of the latest output token decide the next one.
    float echo_bonus = 0.0f;
    int64_t pending_seen = 0;  // chunk tokens launched as kPendingToken
    int64_t verify_rows = 0;   // verify chunks' rows sampled here

private:
    // sample_token's greedy: the lowest id of the largest logit, NaN skipped.
    static SampleResult greedy(const std::vector<float>& row) {
        SampleResult s;
        float best = -INFINITY;
        for (size_t i = 0; i < row.size(); ++i)
            if (row[i] > best) best = row[i], s.token = int32_t(i);
        return s;
    }
    // The kFull row through the host sampler: penalty tokens back into prompt / output counts.
    SampleResult full(std::vector<float>& row, const DeviceSampleParams& d, int j = 0) const {
        SamplingParams p;
        p.temperature = d.temperature;
        p.top_p = d.top_p;
        p.min_p = d.min_p;
        p.top_k = d.top_k;
        p.repetition_penalty = d.repetition_penalty;
        p.presence_penalty = d.presence_penalty;
        p.frequency_penalty = d.frequency_penalty;
        p.logprobs = d.logprobs;
        p.ignore_eos = true;  // masks come as masked entries
        std::vector<int32_t> prompt, output;
        bool any_mask = false;
        for (const PenaltyToken& t : d.penalty_tokens) {
            if (t.bias != 0.0f) p.logit_bias.emplace_back(t.token, t.bias);
            if (t.masked) p.stop_token_ids.push_back(t.token), any_mask = true;
            for (int32_t k = 0; k < t.output_count; ++k) output.push_back(t.token);
            if (t.seen && t.output_count == 0) prompt.push_back(t.token);
        }
        PenaltyState pen;
        pen.reset(prompt, output);
        const SampleContext ctx{.seed = d.seed,
                                .stream = d.stream,
                                .position = d.position + j,
                                .suppress_stops = any_mask,
                                .eos_token = int32_t(inner_.config().eos_token_id)};
        return sample_token(row, p, pen, ctx);
    }

    ModelRunner& inner_;
};

}  // namespace dsv4::test
