// RecordingRunner: wraps a ModelRunner and keeps every logits row it returns, per sequence id, in
// step order (the engine must send every row to the host: EngineConfig::device_sampling off), so
// tests can compare the logits of two engine runs row by row.
#pragma once

#include <map>
#include <vector>

#include "runtime/model_runner.h"

namespace dsv4::test {

class RecordingRunner final : public ModelRunner {
public:
    explicit RecordingRunner(ModelRunner& inner) : inner_(inner) {}
    const ModelConfig& config() const override { return inner_.config(); }
    const KvLayout& kv_layout() const override { return inner_.kv_layout(); }
    int64_t n_pages() const override { return inner_.n_pages(); }
    int64_t max_positions() const override { return inner_.max_positions(); }
    Status forward(const ForwardBatch& b, std::vector<std::vector<float>>& logits) override {
        const size_t first = logits.size();
        DSV4_RETURN_IF_ERROR(inner_.forward(b, logits));
        size_t r = first;
        for (const auto& c : b.seqs)
            if (c.want_logits) rows[c.seq_id].push_back(logits[r++]);
        return Status::ok();
    }
    std::map<int64_t, std::vector<std::vector<float>>> rows;

private:
    ModelRunner& inner_;
};

}  // namespace dsv4::test
