// FakeRunner: a deterministic stand-in ModelRunner for engine and server tests (and for
// `dsv4 serve --model fake` demos). It keeps its "KV cache" in real pages like a model would:
// each token page stores the token ids of its positions and the state page a running count,
// and the logits of a position are computed from the whole history read back through the page
// table. So any scheduler bug (a page shared by two sequences, a page freed too early, a stale
// page after preemption, a chunk at the wrong offset) changes the output or fails the step.
//
// Logits: if a script rule matches (its trigger occurs in the history), the next script token
// gets a large logit, so output follows the script and ends with EOS; otherwise a few peaks at
// token ids hashed from the full history (a "model" that depends on every previous token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_runner.h"

namespace dsv4 {

struct FakeRunnerOptions {
    int64_t vocab_size = 129280;
    int64_t eos_token_id = 1;
    int64_t bos_token_id = 0;
    int64_t max_context = 4096;
    int64_t page_tokens = 16;
    int64_t n_pages = 4096;
    int64_t max_positions = INT64_MAX;  // a runner's own per-sequence limit (as the CUDA runner's max_context)
    int64_t step_delay_us = 0;          // added to every forward (slow decode)
    int64_t token_delay_us = 0;         // added per token in the batch (slow prefill)
    // > 0: the N-th step with at least one sequence (1 = the first) and every later one fail with
    // StatusCode::kDeviceLost, the stand-in for a sticky CUDA error (RuntimeOptions::fault_inject_step).
    int64_t fault_inject_step = 0;
    struct Rule {
        std::vector<int32_t> trigger;  // empty: always matches
        std::vector<int32_t> output;   // followed by EOS
    };
    std::vector<Rule> rules;
};

class FakeRunner final : public ModelRunner {
public:
    explicit FakeRunner(FakeRunnerOptions opt);
    const ModelConfig& config() const override { return cfg_; }
    const KvLayout& kv_layout() const override { return layout_; }
    int64_t n_pages() const override { return opt_.n_pages; }
    int64_t max_positions() const override { return opt_.max_positions; }
    Status forward(const ForwardBatch& batch, std::vector<std::vector<float>>& logits) override;

    // Parses rules from JSON: [{"trigger": [ids] , "output": [ids]}, ...].
    static Status parse_rules(const std::string& json_text, std::vector<FakeRunnerOptions::Rule>& out);

private:
    void fill_logits(const std::vector<int32_t>& history, std::vector<float>& row) const;

    FakeRunnerOptions opt_;
    ModelConfig cfg_;
    KvLayout layout_;
    std::vector<std::vector<int32_t>> pages_;  // [n_pages][page_tokens]; -1 = unwritten
    int64_t steps_ = 0;                        // steps with a sequence so far (fault_inject_step)
};

}  // namespace dsv4
