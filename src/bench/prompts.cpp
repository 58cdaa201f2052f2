// Prompt loading and seeded drawing (see prompts.h). Gzip files are read through the
// system's `gzip -dc` rather than linking zlib: the bench reads them once at start-up.
#include "bench/prompts.h"

#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/stats.h"

namespace dsv4::bench {
namespace {

// Plain words for synthetic prompts: common English, so any tokenizer splits them into a
// roughly known number of tokens (about one to two per word).
constexpr const char* kWords[] = {
    "the",     "model",   "server",  "token",    "river",  "garden", "quiet",   "number",  "light",   "window",
    "letter",  "simple",  "answer",  "market",   "winter", "summer", "planet",  "engine",  "memory",  "signal",
    "forest",  "yellow",  "silver",  "mountain", "ocean",  "system", "history", "music",   "paper",   "circle",
    "bridge",  "island",  "morning", "evening",  "city",   "story",  "write",   "explain", "travel",  "measure",
    "careful", "bright",  "little",  "large",    "market", "orange", "purple",  "table",   "friend",  "teacher",
    "cloud",   "stone",   "water",   "fire",     "number", "figure", "about",   "between", "through", "under",
    "because", "however", "before",  "after",
};

Result<std::string> read_file(const std::string& path) {
    if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
        std::ifstream probe(path);
        if (!probe) return error(StatusCode::kNotFound, "cannot open prompt file {}", path);
        std::string cmd = "gzip -dc '" + path + "'";
        FILE* p = popen(cmd.c_str(), "r");
        if (!p) return error(StatusCode::kUnavailable, "cannot run gzip for {}", path);
        std::string out;
        char buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
        if (pclose(p) != 0) return error(StatusCode::kDataLoss, "gzip -dc {} failed", path);
        return out;
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) return error(StatusCode::kNotFound, "cannot open prompt file {}", path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string basename_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

Result<std::vector<std::string>> load_sharegpt(const std::string& json_text) {
    auto j = nlohmann::json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) {
        return error(StatusCode::kDataLoss, "ShareGPT file is not a JSON array");
    }
    std::vector<std::string> out;
    for (const auto& conv : j) {
        if (!conv.is_object() || !conv.contains("conversations")) continue;
        for (const auto& turn : conv["conversations"]) {
            if (!turn.is_object()) continue;
            const auto from = turn.value("from", std::string());
            if (from != "human" && from != "user") continue;
            auto v = turn.find("value");
            if (v != turn.end() && v->is_string() && !v->get<std::string>().empty()) {
                out.push_back(v->get<std::string>());
            }
            break;  // only the first human turn: later turns depend on model replies
        }
    }
    if (out.empty()) return error(StatusCode::kDataLoss, "ShareGPT file holds no human turns");
    return out;
}

Result<std::vector<std::string>> load_jsonl_prompts(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            return error(StatusCode::kDataLoss, "JSONL line {} is not a JSON object", line_no);
        }
        std::string p;
        if (auto t = j.find("turns"); t != j.end() && t->is_array() && !t->empty() && (*t)[0].is_string()) {
            p = (*t)[0].get<std::string>();
        } else if (auto pr = j.find("prompt"); pr != j.end() && pr->is_string()) {
            p = pr->get<std::string>();
        } else if (auto tx = j.find("text"); tx != j.end() && tx->is_string()) {
            p = tx->get<std::string>();
        }
        if (!p.empty()) out.push_back(std::move(p));
    }
    if (out.empty()) {
        return error(StatusCode::kDataLoss, "JSONL holds no prompts (turns[0], prompt or text)");
    }
    return out;
}

Result<std::vector<std::string>> load_prompt_file(const std::string& path) {
    DSV4_ASSIGN_OR_RETURN(std::string text, read_file(path));
    const size_t first = text.find_first_not_of(" \t\r\n");
    // A JSON array is ShareGPT; anything else is read as JSON lines.
    auto r = (first != std::string::npos && text[first] == '[') ? load_sharegpt(text) : load_jsonl_prompts(text);
    if (!r.is_ok()) return r.status().with_context(path);
    return r;
}

Result<PromptSource> PromptSource::create(const PromptSourceOptions& opt) {
    PromptSource s;
    s.opt_ = opt;
    if (opt.kind == PromptKind::kFile) {
        DSV4_ASSIGN_OR_RETURN(s.pool_, load_prompt_file(opt.path));
    } else {
        if (opt.input_len <= 0) return invalid_argument("--input-len must be positive");
        if (opt.kind == PromptKind::kRandomIds && opt.token_id_max <= opt.token_id_min) {
            return invalid_argument("token id range [{}, {}) is empty", opt.token_id_min, opt.token_id_max);
        }
    }
    return s;
}

std::vector<Prompt> PromptSource::draw(uint64_t seed, int n) const {
    std::vector<Prompt> out;
    out.reserve(n);
    SplitMix64 rng(seed);
    if (opt_.kind == PromptKind::kFile) {
        std::vector<size_t> perm(pool_.size());
        while (static_cast<int>(out.size()) < n) {
            std::iota(perm.begin(), perm.end(), 0);
            for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
            for (size_t i = 0; i < perm.size() && static_cast<int>(out.size()) < n; ++i) {
                Prompt p;
                p.text = pool_[perm[i]];
                out.push_back(std::move(p));
            }
        }
        return out;
    }
    constexpr size_t n_words = sizeof(kWords) / sizeof(kWords[0]);
    for (int k = 0; k < n; ++k) {
        Prompt p;
        if (opt_.kind == PromptKind::kRandomIds) {
            const uint64_t span = static_cast<uint64_t>(opt_.token_id_max - opt_.token_id_min);
            p.ids.reserve(opt_.input_len);
            for (int i = 0; i < opt_.input_len; ++i) {
                p.ids.push_back(opt_.token_id_min + static_cast<int32_t>(rng.below(span)));
            }
            p.known_tokens = opt_.input_len;
        } else {
            for (int i = 0; i < opt_.input_len; ++i) {
                if (i) p.text.push_back(' ');
                p.text += kWords[rng.below(n_words)];
            }
        }
        out.push_back(std::move(p));
    }
    return out;
}

std::string PromptSource::describe() const {
    switch (opt_.kind) {
        case PromptKind::kFile:
            return basename_of(opt_.path) + " (" + std::to_string(pool_.size()) + " prompts)";
        case PromptKind::kRandomIds:
            return "random-ids x" + std::to_string(opt_.input_len);
        case PromptKind::kRandomWords:
            return "random-words x" + std::to_string(opt_.input_len);
    }
    return "?";
}

}  // namespace dsv4::bench
