// JSON-lines read/write for benchmark records (see record_io.h). Writes open-append-close
// per record so that a run killed midway still leaves every finished iteration on disk.
#include "bench/record_io.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace dsv4::bench {
namespace {

std::string run_capture(const char* cmd) {
    FILE* p = popen(cmd, "r");
    if (!p) return "";
    std::string out;
    std::array<char, 256> buf;
    size_t got;
    while ((got = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), got);
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

nlohmann::json dist_json(const Dist& d) {
    return {{"mean", d.mean}, {"median", d.median}, {"p90", d.p90},    {"p99", d.p99},
            {"min", d.min},   {"max", d.max},       {"count", d.count}};
}

Dist dist_from(const nlohmann::json& j) {
    Dist d;
    if (!j.is_object()) return d;
    d.mean = j.value("mean", 0.0);
    d.median = j.value("median", 0.0);
    d.p90 = j.value("p90", 0.0);
    d.p99 = j.value("p99", 0.0);
    d.min = j.value("min", 0.0);
    d.max = j.value("max", 0.0);
    d.count = j.value("count", int64_t{0});
    return d;
}

}  // namespace

RunInfo current_run_info() {
    RunInfo info;
    info.git_sha = run_capture("git rev-parse --short=12 HEAD 2>/dev/null");
    if (info.git_sha.empty()) info.git_sha = "unknown";
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) == 0) info.host = host.data();
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::array<char, 32> date{};
    std::strftime(date.data(), date.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
    info.date = date.data();
    return info;
}

nlohmann::json record_to_json(const RunInfo& info, const IterationMetrics& m) {
    nlohmann::json j = {
        {"schema", "dsv4.bench.v1"},
        {"git_sha", info.git_sha},
        {"url", info.url},
        {"model", info.model},
        {"date", info.date},
        {"host", info.host},
        {"endpoint", info.endpoint},
        {"dataset", info.dataset},
        {"label", info.label},
        {"max_tokens", info.max_tokens},
        {"ignore_eos", info.ignore_eos},
        {"seed", info.seed},
        {"config", m.config},
        {"level", m.level},
        {"iteration", m.iteration},
        {"n_requests", m.n_requests},
        {"n_ok", m.n_ok},
        {"n_errors", m.n_errors},
        {"n_refused", m.n_refused},
        {"n_refused_no_retry_after", m.n_refused_no_retry_after},
        {"n_unanswered", m.n_unanswered},
        {"duration_s", m.duration_s},
        {"input_tokens", m.input_tokens},
        {"input_tokens_known", m.input_tokens_known},
        {"output_tokens", m.output_tokens},
        {"output_tok_s", m.output_tok_s},
        {"total_tok_s", m.total_tok_s},
        {"req_s", m.req_s},
        {"tok_s_per_user", m.tok_s_per_user},
        {"ttft_ms", dist_json(m.ttft_ms)},
        {"tpot_ms", dist_json(m.tpot_ms)},
        {"itl_ms", dist_json(m.itl_ms)},
        {"e2e_ms", dist_json(m.e2e_ms)},
        {"errors", m.error_samples},
    };
    // Only A/B records carry a pair; readers treat a missing field as "not paired".
    if (m.pair >= 0) {
        j["pair"] = m.pair;
        j["pair_position"] = m.pair_position;
    }
    return j;
}

Result<StoredRecord> record_from_json(const nlohmann::json& j) {
    if (!j.is_object() || j.value("schema", std::string()) != "dsv4.bench.v1") {
        return error(StatusCode::kDataLoss, "not a dsv4.bench.v1 record");
    }
    StoredRecord r;
    try {
        r.info.git_sha = j.value("git_sha", "");
        r.info.url = j.value("url", "");
        r.info.model = j.value("model", "");
        r.info.date = j.value("date", "");
        r.info.host = j.value("host", "");
        r.info.endpoint = j.value("endpoint", "");
        r.info.dataset = j.value("dataset", "");
        r.info.label = j.value("label", "");
        r.info.max_tokens = j.value("max_tokens", 0);
        r.info.ignore_eos = j.value("ignore_eos", false);
        r.info.seed = j.value("seed", uint64_t{0});
        IterationMetrics& m = r.m;
        m.config = j.value("config", "");
        m.level = j.at("level").get<int>();
        m.iteration = j.value("iteration", 0);
        m.pair = j.value("pair", -1);
        m.pair_position = j.value("pair_position", -1);
        m.n_requests = j.value("n_requests", 0);
        m.n_ok = j.value("n_ok", 0);
        m.n_errors = j.value("n_errors", 0);
        m.n_refused = j.value("n_refused", 0);
        m.n_refused_no_retry_after = j.value("n_refused_no_retry_after", 0);
        m.n_unanswered = j.value("n_unanswered", 0);
        m.duration_s = j.value("duration_s", 0.0);
        m.input_tokens = j.value("input_tokens", int64_t{0});
        m.input_tokens_known = j.value("input_tokens_known", true);
        m.output_tokens = j.value("output_tokens", int64_t{0});
        m.output_tok_s = j.at("output_tok_s").get<double>();
        m.total_tok_s = j.value("total_tok_s", 0.0);
        m.req_s = j.value("req_s", 0.0);
        m.tok_s_per_user = j.value("tok_s_per_user", 0.0);
        m.ttft_ms = dist_from(j.value("ttft_ms", nlohmann::json()));
        m.tpot_ms = dist_from(j.value("tpot_ms", nlohmann::json()));
        m.itl_ms = dist_from(j.value("itl_ms", nlohmann::json()));
        m.e2e_ms = dist_from(j.value("e2e_ms", nlohmann::json()));
        if (auto e = j.find("errors"); e != j.end() && e->is_array()) {
            for (const auto& s : *e) {
                if (s.is_string()) m.error_samples.push_back(s.get<std::string>());
            }
        }
    } catch (const nlohmann::json::exception& e) {
        return error(StatusCode::kDataLoss, "bad record: {}", e.what());
    }
    return r;
}

Result<JsonlWriter> JsonlWriter::open(const std::string& path, bool append) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    std::ofstream f(path, append ? std::ios::app : std::ios::trunc);
    if (!f) return error(StatusCode::kUnavailable, "cannot write {}", path);
    JsonlWriter w;
    w.path_ = path;
    return w;
}

Status JsonlWriter::write(const RunInfo& info, const IterationMetrics& m) {
    std::ofstream f(path_, std::ios::app);
    if (!f) return error(StatusCode::kUnavailable, "cannot append to {}", path_);
    f << record_to_json(info, m).dump() << '\n';
    if (!f) return error(StatusCode::kUnavailable, "write to {} failed", path_);
    return Status::ok();
}

Result<std::vector<StoredRecord>> read_jsonl(const std::string& path) {
    std::ifstream f(path);
    if (!f) return error(StatusCode::kNotFound, "cannot open {}", path);
    std::vector<StoredRecord> out;
    std::string line;
    int line_no = 0;
    while (std::getline(f, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded()) return error(StatusCode::kDataLoss, "{}:{}: not JSON", path, line_no);
        auto r = record_from_json(j);
        if (!r.is_ok()) return r.status().with_context(fmt::format("{}:{}", path, line_no));
        out.push_back(std::move(r).value());
    }
    if (out.empty()) return error(StatusCode::kDataLoss, "{} holds no records", path);
    return out;
}

}  // namespace dsv4::bench
