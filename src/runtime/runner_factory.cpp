#include "runtime/runner_factory.h"

#include <filesystem>

#include "model/checkpoint.h"
#include "model/flash_proxy.h"
#include "model/ref_model.h"
#include "runtime/ref_runner.h"
#ifdef DSV4_HAVE_CUDA
#include "runtime/cuda_runner.h"
#include "runtime/multi_gpu_runner.h"
#endif

namespace dsv4 {

Result<ModelConfig> load_model_config(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return error(StatusCode::kNotFound, "model '{}' is neither 'tiny' nor a checkpoint directory", dir);
    const fs::path path = fs::path(dir) / "config.json";
    if (!fs::exists(path, ec)) return error(StatusCode::kNotFound, "model directory '{}' has no config.json", dir);
    return ModelConfig::from_file(path.string());
}

Result<ModelConfig> runner_model_config(const RunnerOptions& opt) {
    if (opt.synthetic_flash_layers > 0) {
        FlashProxySpec spec;
        spec.n_layers = opt.synthetic_flash_layers;
        DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, flash_proxy_config(spec));
        // Speculative decoding drafts with a synthetic mtp.0 block, as the checkpoint ships one.
        if (opt.speculative_tokens > 0) cfg.num_nextn_predict_layers = 1;
        return cfg;
    }
    if (opt.model == "tiny") return tiny_model_config();
    return load_model_config(opt.model);
}

Result<std::shared_ptr<const RefModel>> load_ref_model(const std::string& model, uint64_t seed, RefNumerics numerics) {
    if (model == "tiny") {
        ModelConfig cfg = tiny_model_config();
        DSV4_RETURN_IF_ERROR(cfg.validate());
        ModelWeights w = ModelWeights::random(cfg, seed);
        return std::shared_ptr<const RefModel>(std::make_shared<RefModel>(std::move(cfg), std::move(w), numerics));
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(model, ec))
        return error(StatusCode::kNotFound, "model '{}' is neither 'tiny' nor a checkpoint directory", model);
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(model));
    DSV4_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model));
    DSV4_ASSIGN_OR_RETURN(ModelWeights w, ModelWeights::load(cfg, ckpt));
    return std::shared_ptr<const RefModel>(std::make_shared<RefModel>(std::move(cfg), std::move(w), numerics));
}

Result<std::unique_ptr<ModelRunner>> make_model_runner(const RunnerOptions& opt) {
    if (opt.backend != "cpu") {
        if (opt.backend != "cuda") return invalid_argument("unknown backend '{}' (expected cpu or cuda)", opt.backend);
        // The CUDA runner drafts with the checkpoint's MTP block only (CudaRunnerOptions::spec_tokens); the
        // runner itself refuses speculation over more than one GPU.
        if (opt.speculative_tokens > 0 && opt.speculative_draft != "mtp")
            return invalid_argument(
                "--speculative-draft '{}' runs on the cpu backend only: the cuda backend drafts with the "
                "checkpoint's MTP block (--speculative-draft mtp)",
                opt.speculative_draft);
#ifdef DSV4_HAVE_CUDA
        CudaRunnerOptions co;
        co.page_tokens = opt.page_tokens;
        co.n_pages = opt.n_pages;
        co.gpu_memory_utilization = opt.gpu_memory_utilization;
        co.max_seqs = opt.max_seqs;
        if (opt.max_context > 0) co.max_context = opt.max_context;
        if (opt.max_step_tokens > 0) co.max_step_tokens = opt.max_step_tokens;
        co.rt = opt.rt;
        // Speculative decoding: the checkpoint's MTP block drafts (loaded only then).
        co.spec_tokens = opt.speculative_tokens;
        co.mtp_blocks = opt.speculative_tokens > 0 ? 1 : 0;
        if (opt.synthetic_flash_layers > 0) {
            DSV4_ASSIGN_OR_RETURN(ModelConfig fcfg, runner_model_config(opt));
            SyntheticWeightsOptions wo;
            wo.seed = opt.seed + 1;
            DSV4_ASSIGN_OR_RETURN(
                auto r, make_multi_gpu_runner(
                            opt.gpus, co, [&](int, const CudaRunnerOptions& o) -> Result<std::unique_ptr<ModelRunner>> {
                                DSV4_ASSIGN_OR_RETURN(auto b, make_cuda_runner_synthetic(fcfg, wo, o));
                                return std::unique_ptr<ModelRunner>(std::move(b));
                            }));
            return std::unique_ptr<ModelRunner>(std::move(r));
        }
        if (opt.model == "tiny") {
            // The built-in tiny model has host weights only (uploaded as f32).
            DSV4_ASSIGN_OR_RETURN(auto cmodel, load_ref_model(opt.model, opt.seed));
            if (opt.gpus == 1) return make_cuda_runner(cmodel, std::string(), co);
            DSV4_ASSIGN_OR_RETURN(auto r, make_multi_gpu_runner(opt.gpus, co, [&](int, const CudaRunnerOptions& o) {
                                      return make_cuda_runner(cmodel, std::string(), o);
                                  }));
            return std::unique_ptr<ModelRunner>(std::move(r));
        }
        // A checkpoint directory: streamed from the shards to the GPUs; the CPU RefModel (host f32
        // copies of every weight) is never built.
        DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, load_model_config(opt.model));
        if (opt.gpus == 1) return make_cuda_runner(cfg, opt.model, co);
        DSV4_ASSIGN_OR_RETURN(auto r, make_multi_gpu_runner(opt.gpus, co, [&](int, const CudaRunnerOptions& o) {
                                  return make_cuda_runner(cfg, opt.model, o);
                              }));
        return std::unique_ptr<ModelRunner>(std::move(r));
#else
        return error(StatusCode::kUnimplemented, "backend 'cuda' is not available in this build (no nvcc)");
#endif
    }
    if (opt.gpus != 1 || opt.synthetic_flash_layers > 0)
        return invalid_argument("--gpus and --synthetic-flash need --backend cuda");
    if (opt.speculative_draft != "mtp" && opt.speculative_draft != "self")
        return invalid_argument("speculative draft '{}' is neither 'mtp' nor 'self'", opt.speculative_draft);
    DSV4_ASSIGN_OR_RETURN(auto model, load_ref_model(opt.model, opt.seed, opt.numerics));
    int64_t n_pages = opt.n_pages;
    if (n_pages <= 0) {
        const bool mtp = opt.speculative_tokens > 0 && opt.speculative_draft == "mtp";
        DSV4_ASSIGN_OR_RETURN(KvLayout layout,
                              KvLayout::make(model->config(), opt.page_tokens, 4, KvRowFormat::kF32,
                                             mtp && model->mtp_blocks() > 0 ? 1 : 0, opt.speculative_tokens));
        // Default: room for 64 sequences of 4096 tokens.
        n_pages = 64 * layout.pages_for_tokens(4096);
    }
    const RefSpeculation spec{opt.speculative_tokens,
                              opt.speculative_draft == "self" ? DraftSource::kSelf : DraftSource::kMtp};
    DSV4_ASSIGN_OR_RETURN(auto runner, RefRunner::create(model, opt.page_tokens, n_pages, spec));
    return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace dsv4
