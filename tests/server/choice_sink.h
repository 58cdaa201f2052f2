// ChoiceSink: a RequestSink for engine tests that keeps, per choice of a request, what the engine
// emitted: the tokens, their logprobs (when asked for), the finish reason, and the last error text.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sched/engine_core.h"

namespace dsv4 {

class ChoiceSink : public RequestSink {
public:
    void on_event(SeqEvent&& ev) override {
        auto& v = tokens[ev.choice];
        v.insert(v.end(), ev.tokens.begin(), ev.tokens.end());
        for (const SampleResult& r : ev.logprobs) logprobs[ev.choice].push_back(r.logprob);
        if (ev.finish != FinishReason::kNone) finish[ev.choice] = ev.finish;
        if (ev.finish == FinishReason::kError) error = ev.error;
    }
    std::map<int, std::vector<int32_t>> tokens;
    std::map<int, std::vector<float>> logprobs;
    std::map<int, FinishReason> finish;
    std::string error;
};

}  // namespace dsv4
