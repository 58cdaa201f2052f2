// The benchmark's JSON-lines format: one record per (configuration, level, iteration),
// self-describing (git sha, server URL, reported model, date, host, workload) so that files
// from different days can be compared. Schema tag "dsv4.bench.v1". Fields added later are
// optional on reading: "pair" and "pair_position" (A/B records only; see IterationMetrics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"
#include "core/status.h"

namespace dsv4::bench {

// Facts about a run shared by all its records.
struct RunInfo {
    std::string git_sha, url, model, date, host;
    std::string endpoint;  // "chat" or "completions"
    std::string dataset;   // PromptSource::describe()
    std::string label;     // free text from --label (or "A"/"B" URLs in --ab)
    int max_tokens = 0;
    bool ignore_eos = false;
    uint64_t seed = 0;
};

// Collects git sha (of the working directory, else "unknown"), host name and UTC date.
RunInfo current_run_info();

struct StoredRecord {
    RunInfo info;
    IterationMetrics m;
};

nlohmann::json record_to_json(const RunInfo& info, const IterationMetrics& m);
Result<StoredRecord> record_from_json(const nlohmann::json& j);

// Appends one line per record; creates the file when missing.
class JsonlWriter {
public:
    static Result<JsonlWriter> open(const std::string& path, bool append = false);
    Status write(const RunInfo& info, const IterationMetrics& m);
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

Result<std::vector<StoredRecord>> read_jsonl(const std::string& path);

}  // namespace dsv4::bench
