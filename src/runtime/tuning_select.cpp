#include "runtime/tuning_select.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#ifdef DSV4_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#ifndef DSV4_GIT_SHA
#define DSV4_GIT_SHA ""
#endif

namespace dsv4 {

std::string model_shape_key(const ModelConfig& c) {
    return fmt::format("d{} h{}x{} rope{} q{} o{}x{} w{} idx{}x{}k{} e{}x{}k{} hc{}", c.hidden_size, c.n_heads,
                       c.head_dim, c.rope_dim, c.q_lora_rank, c.o_groups, c.o_lora_rank, c.sliding_window,
                       c.index_n_heads, c.index_head_dim, c.index_topk, c.n_routed_experts, c.moe_intermediate_size,
                       c.n_experts_per_tok, c.hc_mult);
}

TuningKey this_machine_tuning_key(const ModelConfig& cfg) {
    TuningKey k;
    k.model_shape = model_shape_key(cfg);
#ifdef DSV4_HAVE_CUDA
    int n = 0;
    cudaDeviceProp p{};
    if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        k.gpu = p.name;
    else
        (void)cudaGetLastError();  // no GPU: not an error for the caller
    int rv = 0;
    if (cudaRuntimeGetVersion(&rv) == cudaSuccess) k.cuda = fmt::format("{}.{}", rv / 1000, (rv % 1000) / 10);
#endif
    std::ifstream f("/proc/driver/nvidia/version");
    std::string line;
    if (f && std::getline(f, line)) k.driver = nvidia_driver_version(line);
    return k;
}

std::string nvidia_driver_version(const std::string& first_line) {
    const size_t at = first_line.find("Kernel Module");
    if (at == std::string::npos) return "";
    // Whitespace-separated tokens after the marker; the first of digits and dots with a dot in it.
    std::istringstream in(first_line.substr(at));
    std::string tok;
    while (in >> tok)
        if (tok.find('.') != std::string::npos && tok.find_first_not_of("0123456789.") == std::string::npos &&
            std::isdigit(static_cast<unsigned char>(tok.front())))
            return tok;
    return "";
}

std::string build_git_sha() { return DSV4_GIT_SHA; }

std::vector<std::string> tuning_search_dirs(const std::function<const char*(const char*)>& env) {
    std::vector<std::string> out;
    auto set = [&](const char* k) {
        const char* v = env(k);
        return v && *v ? std::string(v) : std::string();
    };
    if (const std::string d = set("DSV4_TUNING_DIR"); !d.empty()) out.push_back(d);
    if (const std::string x = set("XDG_CONFIG_HOME"); !x.empty())
        out.push_back(x + "/dsv4/tuning");
    else if (const std::string h = set("HOME"); !h.empty())
        out.push_back(h + "/.config/dsv4/tuning");
    return out;
}

Result<TuningChoice> choose_tuning_file(const std::string& flag, const TuningKey& here,
                                        const std::vector<std::string>& dirs, const std::string& here_git_sha) {
    TuningChoice c;
    if (flag == "none") {
        c.log.push_back("tuning file: none (--tuning none); the kernels' heuristics apply");
        return c;
    }
    if (!flag.empty()) {
        DSV4_ASSIGN_OR_RETURN(TuningFile f, read_tuning_file(flag));
        c.log.push_back(fmt::format("tuning file: {} (--tuning; made {} by {})", flag,
                                    f.made_date.empty() ? "?" : f.made_date,
                                    f.made_git_sha.empty() ? "?" : f.made_git_sha));
        bool mismatch = false;
        for (const std::string& d : tuning_key_differences(f, here, here_git_sha, &mismatch))
            c.log.push_back("warning: tuning file " + flag + ": " + d);
        c.file = std::move(f);
        return c;
    }
    namespace fs = std::filesystem;
    std::vector<std::pair<TuningFile, std::string>> found;  // (file, its path)
    for (const std::string& dir : dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) continue;
        std::vector<std::string> paths;
        for (const auto& e : fs::directory_iterator(dir, ec))
            if (e.path().extension() == ".json") paths.push_back(e.path().string());
        std::sort(paths.begin(), paths.end());
        for (const std::string& p : paths) {
            auto f = read_tuning_file(p);
            if (!f.is_ok()) {
                c.log.push_back("warning: skipped " + f.status().message());
                continue;
            }
            if (f->key.gpu != here.gpu || f->key.model_shape != here.model_shape) continue;
            found.emplace_back(std::move(f).value(), p);
        }
        if (!found.empty()) break;  // the first directory with a match wins
    }
    if (found.empty()) {
        c.log.push_back(fmt::format(
            "tuning file: none found for GPU '{}' and model shape '{}' (searched: {}); the "
            "kernels' heuristics apply",
            here.gpu, here.model_shape, dirs.empty() ? "no directory" : fmt::format("{}", fmt::join(dirs, ", "))));
        return c;
    }
    // made.date is ISO 8601: text order is time order; the stable sort keeps file-name order on ties.
    std::stable_sort(found.begin(), found.end(),
                     [](const auto& a, const auto& b) { return a.first.made_date > b.first.made_date; });
    TuningFile& f = found.front().first;
    c.log.push_back(fmt::format("tuning file: {} (the default for this GPU and model shape; made {} by {})",
                                found.front().second, f.made_date.empty() ? "?" : f.made_date,
                                f.made_git_sha.empty() ? "?" : f.made_git_sha));
    bool mismatch = false;
    for (const std::string& d : tuning_key_differences(f, here, here_git_sha, &mismatch))
        c.log.push_back("warning: tuning file " + found.front().second + ": " + d);
    c.file = std::move(f);
    return c;
}

}  // namespace dsv4
