#include "runtime/tuning_file.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dsv4 {

namespace {

using nlohmann::json;

constexpr std::string_view kSchema = "dsv4.tuning.v1";

struct OpInfo {
    TunedOp op;
    const char* name;
    bool has_rows, has_context, has_split;
};
constexpr OpInfo kOps[] = {
    {TunedOp::kSparseDecode, "sparse_decode", false, true, true},
    {TunedOp::kDenseGemv, "dense_gemv", false, false, false},
    {TunedOp::kMoeExpert, "moe_expert", true, false, false},
    {TunedOp::kMoeGrouped, "moe_grouped", true, false, false},
};

const OpInfo& info_of(TunedOp op) {
    for (const OpInfo& i : kOps)
        if (i.op == op) return i;
    return kOps[0];
}

Result<ShapeRange> parse_range(const json& j, const std::string& where) {
    if (!j.is_array() || j.size() != 2 || !j[0].is_number_integer() || !j[1].is_number_integer())
        return invalid_argument("{}: expected [lo, hi] (two integers)", where);
    ShapeRange r{j[0].get<int64_t>(), j[1].get<int64_t>()};
    if (r.lo < 0 || r.hi < r.lo) return invalid_argument("{}: [{}, {}] is not 0 <= lo <= hi", where, r.lo, r.hi);
    return r;
}

bool overlap(const ShapeRange& a, const ShapeRange& b) { return a.lo <= b.hi && b.lo <= a.hi; }

std::string range_text(const char* dim, const ShapeRange& r) {
    return r.any() ? std::string() : fmt::format(" {} {}-{}", dim, r.lo, r.hi);
}

Result<std::string> string_field(const json& obj, const char* field, const std::string& where, bool required) {
    auto it = obj.find(field);
    if (it == obj.end()) {
        if (required) return invalid_argument("{}: missing \"{}\"", where, field);
        return std::string();
    }
    if (!it->is_string()) return invalid_argument("{}.{}: expected a string", where, field);
    return it->get<std::string>();
}

Result<TuningRule> parse_rule(const json& j, const std::string& where) {
    if (!j.is_object()) return invalid_argument("{}: expected an object", where);
    TuningRule r;
    DSV4_ASSIGN_OR_RETURN(const std::string op, string_field(j, "op", where, true));
    const OpInfo* info = nullptr;
    for (const OpInfo& i : kOps)
        if (op == i.name) info = &i;
    if (!info)
        return invalid_argument("{}.op: unknown op '{}' (known: sparse_decode, dense_gemv, moe_expert, moe_grouped)",
                                where, op);
    r.op = info->op;
    for (const auto& [k, v] : j.items()) {
        const std::string f = where + "." + k;
        if (k == "op") continue;
        if (k == "tokens") {
            DSV4_ASSIGN_OR_RETURN(r.tokens, parse_range(v, f));
        } else if (k == "rows_per_expert") {
            if (!info->has_rows) return invalid_argument("{}: {} has no rows per expert", f, op);
            DSV4_ASSIGN_OR_RETURN(r.rows_per_expert, parse_range(v, f));
        } else if (k == "context") {
            if (!info->has_context) return invalid_argument("{}: {} has no context dimension", f, op);
            DSV4_ASSIGN_OR_RETURN(r.context, parse_range(v, f));
        } else if (k == "variant") {
            if (!v.is_string()) return invalid_argument("{}: expected a string", f);
            r.variant = v.get<std::string>();
        } else if (k == "split_kv_target_ctas") {
            if (!info->has_split) return invalid_argument("{}: {} takes no split-KV target", f, op);
            if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20))
                return invalid_argument("{}: expected an integer from 1 to 1048576", f);
            r.split_kv_target_ctas = v.get<int>();
        } else if (k == "measurement") {
            if (!v.is_object()) return invalid_argument("{}: expected an object", f);
            r.measurement_json = v.dump();
        } else {
            return invalid_argument(
                "{}: unknown field (a rule takes op, tokens, rows_per_expert, context, variant, "
                "split_kv_target_ctas, measurement)",
                f);
        }
    }
    if (r.variant.empty() && r.split_kv_target_ctas == 0)
        return invalid_argument("{}: names neither a variant nor a parameter", where);
    return r;
}

}  // namespace

const char* tuned_op_name(TunedOp op) { return info_of(op).name; }

bool TuningRule::matches(const ShapeQuery& q) const {
    auto in = [](const ShapeRange& r, int64_t v) { return r.any() || (v >= 0 && r.contains(v)); };
    return in(tokens, q.tokens) && in(rows_per_expert, q.rows_per_expert) && in(context, q.context);
}

std::string TuningRule::describe() const {
    std::string s = std::string(tuned_op_name(op)) + range_text("tokens", tokens) +
                    range_text("rows_per_expert", rows_per_expert) + range_text("context", context);
    if (tokens.any() && rows_per_expert.any() && context.any()) s += " (any shape)";
    s += " -> " + (variant.empty() ? std::string("(heuristic)") : variant);
    if (split_kv_target_ctas > 0) s += fmt::format(", split_kv_target_ctas {}", split_kv_target_ctas);
    return s;
}

Result<TuningFile> parse_tuning_json(std::string_view text, std::string_view origin) {
    const std::string o(origin);
    json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument("tuning file {}: not valid JSON", o);
    if (!j.is_object()) return invalid_argument("tuning file {}: expected a JSON object", o);
    TuningFile f;
    f.path = o;
    DSV4_ASSIGN_OR_RETURN(const std::string schema, string_field(j, "schema", "tuning file " + o, true));
    if (schema != kSchema)
        return invalid_argument("tuning file {}: schema '{}' is not {} (made by another dsv4 version?)", o, schema,
                                kSchema);
    for (const auto& [k, v] : j.items())
        if (k != "schema" && k != "key" && k != "made" && k != "options" && k != "rules")
            return invalid_argument("tuning file {}: unknown field \"{}\" (schema, key, made, options, rules)", o, k);

    const auto key = j.find("key");
    if (key == j.end() || !key->is_object()) return invalid_argument("tuning file {}: missing \"key\" object", o);
    const std::string kw = "tuning file " + o + ": key";
    DSV4_ASSIGN_OR_RETURN(f.key.gpu, string_field(*key, "gpu", kw, true));
    DSV4_ASSIGN_OR_RETURN(f.key.driver, string_field(*key, "driver", kw, false));
    DSV4_ASSIGN_OR_RETURN(f.key.cuda, string_field(*key, "cuda", kw, false));
    DSV4_ASSIGN_OR_RETURN(f.key.model_shape, string_field(*key, "model_shape", kw, true));

    if (const auto made = j.find("made"); made != j.end()) {
        if (!made->is_object()) return invalid_argument("tuning file {}: \"made\" is not an object", o);
        const std::string mw = "tuning file " + o + ": made";
        DSV4_ASSIGN_OR_RETURN(f.made_date, string_field(*made, "date", mw, false));
        DSV4_ASSIGN_OR_RETURN(f.made_git_sha, string_field(*made, "git_sha", mw, false));
        DSV4_ASSIGN_OR_RETURN(f.made_command, string_field(*made, "command", mw, false));
    }
    if (const auto opts = j.find("options"); opts != j.end()) {
        if (!opts->is_object()) return invalid_argument("tuning file {}: \"options\" is not an object", o);
        for (const auto& [k, v] : opts->items()) {
            if (v.is_string())
                f.options.emplace_back(k, v.get<std::string>());
            else if (v.is_boolean())
                f.options.emplace_back(k, v.get<bool>() ? "1" : "0");
            else if (v.is_number_integer())
                f.options.emplace_back(k, std::to_string(v.get<int64_t>()));
            else
                return invalid_argument("tuning file {}: options.{}: expected a string, integer or boolean", o, k);
        }
    }
    if (const auto rules = j.find("rules"); rules != j.end()) {
        if (!rules->is_array()) return invalid_argument("tuning file {}: \"rules\" is not an array", o);
        for (size_t i = 0; i < rules->size(); ++i) {
            DSV4_ASSIGN_OR_RETURN(TuningRule r,
                                  parse_rule((*rules)[i], fmt::format("tuning file {}: rules[{}]", o, i)));
            for (size_t p = 0; p < f.rules.size(); ++p) {
                const TuningRule& q = f.rules[p];
                if (q.op == r.op && overlap(q.tokens, r.tokens) && overlap(q.rows_per_expert, r.rows_per_expert) &&
                    overlap(q.context, r.context))
                    return invalid_argument(
                        "tuning file {}: rules[{}] ({}) overlaps rules[{}] ({}); each shape of an op "
                        "must have one rule",
                        o, i, r.describe(), p, q.describe());
            }
            f.rules.push_back(std::move(r));
        }
    }
    return f;
}

Result<TuningFile> read_tuning_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error(StatusCode::kNotFound, "tuning file {}: cannot be opened", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return invalid_argument("tuning file {}: read error", path);
    return parse_tuning_json(ss.str(), path);
}

std::string tuning_file_json(const TuningFile& f) {
    json j;
    j["schema"] = kSchema;
    j["key"] = {{"gpu", f.key.gpu}, {"driver", f.key.driver}, {"cuda", f.key.cuda}, {"model_shape", f.key.model_shape}};
    j["made"] = {{"date", f.made_date}, {"git_sha", f.made_git_sha}, {"command", f.made_command}};
    json opts = json::object();
    for (const auto& [k, v] : f.options) opts[k] = v;
    j["options"] = opts;
    json rules = json::array();
    for (const TuningRule& r : f.rules) {
        json x = {{"op", tuned_op_name(r.op)}};
        if (!r.tokens.any()) x["tokens"] = {r.tokens.lo, r.tokens.hi};
        if (!r.rows_per_expert.any()) x["rows_per_expert"] = {r.rows_per_expert.lo, r.rows_per_expert.hi};
        if (!r.context.any()) x["context"] = {r.context.lo, r.context.hi};
        if (!r.variant.empty()) x["variant"] = r.variant;
        if (r.split_kv_target_ctas > 0) x["split_kv_target_ctas"] = r.split_kv_target_ctas;
        if (!r.measurement_json.empty()) x["measurement"] = json::parse(r.measurement_json);
        rules.push_back(std::move(x));
    }
    j["rules"] = rules;
    return j.dump(2) + "\n";
}

const TuningRule* find_tuning_rule(const std::vector<TuningRule>& rules, TunedOp op, const ShapeQuery& q) {
    for (const TuningRule& r : rules)
        if (r.op == op && r.matches(q)) return &r;
    return nullptr;
}

std::vector<std::string> tuning_key_differences(const TuningFile& f, const TuningKey& here,
                                                std::string_view here_git_sha, bool* mismatch) {
    std::vector<std::string> out;
    bool bad = false;
    if (f.key.gpu != here.gpu) {
        out.push_back(fmt::format("made on GPU '{}', this is '{}'", f.key.gpu, here.gpu));
        bad = true;
    }
    if (f.key.model_shape != here.model_shape) {
        out.push_back(
            fmt::format("made for model shape '{}', this model is '{}'", f.key.model_shape, here.model_shape));
        bad = true;
    }
    if (!f.key.driver.empty() && !here.driver.empty() && f.key.driver != here.driver)
        out.push_back(fmt::format("made with driver {}, this machine has {}", f.key.driver, here.driver));
    if (!f.key.cuda.empty() && !here.cuda.empty() && f.key.cuda != here.cuda)
        out.push_back(fmt::format("made with CUDA {}, this build uses {}", f.key.cuda, here.cuda));
    if (!f.made_git_sha.empty() && !here_git_sha.empty() && f.made_git_sha != here_git_sha)
        out.push_back(fmt::format("made by build {}, this is build {} (kernels may have changed since)", f.made_git_sha,
                                  here_git_sha));
    if (mismatch) *mismatch = bad;
    return out;
}

}  // namespace dsv4
