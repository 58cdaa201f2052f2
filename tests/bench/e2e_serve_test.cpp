// End-to-end against the real `dsv4 serve` (built-in tiny model, CPU) on loopback: a short
// sweep writes the table, JSONL and plot; an A/A run (--ab on the same server) must report no
// difference. Skipped when the tokenizer file or the serve subcommand is missing.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "bench/record_io.h"

namespace dsv4::bench {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// `dsv4 serve --port 0` as a child process; the URL comes from its "listening on" line.
class ServeProcess {
public:
    explicit ServeProcess(const std::string& log) : log_(log) {
        std::filesystem::remove(log_);
        pid_ = fork();
        if (pid_ == 0) {
            FILE* f = std::freopen(log_.c_str(), "w", stdout);
            (void)f;
            dup2(fileno(stdout), STDERR_FILENO);
            execl(DSV4_EXE, DSV4_EXE, "serve", "--port", "0", "--tokenizer", DSV4_TOKENIZER,
                  static_cast<char*>(nullptr));
            _exit(127);
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < deadline) {
            const std::string text = slurp(log_);
            const size_t at = text.find("listening on http://");
            const size_t eol = at == std::string::npos ? at : text.find('\n', at);
            if (eol != std::string::npos) {
                url_ = text.substr(at + 13, eol - at - 13);
                return;
            }
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    ~ServeProcess() {
        if (pid_ <= 0) return;
        kill(pid_, SIGTERM);
        for (int i = 0; i < 100; ++i) {
            if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
    const std::string& url() const { return url_; }
    std::string log() const { return slurp(log_); }

private:
    std::string log_, url_;
    pid_t pid_ = -1;
};

int run_cli(const std::string& args, const std::string& out_path) {
    const std::string cmd = std::string(DSV4_EXE) + " " + args + " >" + out_path + " 2>&1";
    return std::system(cmd.c_str());
}

class BenchE2eServe : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(DSV4_TOKENIZER)) {
            GTEST_SKIP() << "no tokenizer at " << DSV4_TOKENIZER << " (scripts/get-tokenizer.sh)";
        }
        if (run_cli("serve --help", "/dev/null") != 0) GTEST_SKIP() << "dsv4 serve not built";
        dir_ = ::testing::TempDir() + "bench_serve/";
        std::filesystem::create_directories(dir_);
    }
    std::string dir_;
};

TEST_F(BenchE2eServe, SweepWritesTableJsonlAndPlot) {
    ServeProcess serve(dir_ + "serve_sweep.log");
    ASSERT_FALSE(serve.url().empty()) << serve.log();
    const std::string log = dir_ + "sweep.log";
    std::filesystem::remove(dir_ + "sweep.svg");
    ASSERT_EQ(run_cli("bench --url " + serve.url() +
                          " --conc 1,4 --n 8 --max-tokens 8 --iterations 2 --warmup 1 "
                          "--input-len 8 --no-progress --out " +
                          dir_ + "sweep.jsonl",
                      log),
              0)
        << slurp(log) << serve.log();
    const std::string out = slurp(log);
    EXPECT_NE(out.find("output tok/s"), std::string::npos) << out;
    auto recs = read_jsonl(dir_ + "sweep.jsonl");
    ASSERT_TRUE(recs.is_ok()) << recs.status().to_string();
    ASSERT_EQ(recs->size(), 4u);
    for (const StoredRecord& r : *recs) {
        EXPECT_EQ(r.m.n_ok, 8) << out;
        EXPECT_GT(r.m.output_tok_s, 0);
        EXPECT_FALSE(r.info.model.empty());  // as reported by GET /v1/models
        EXPECT_FALSE(r.info.git_sha.empty());
    }
    if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
        EXPECT_GT(std::filesystem::file_size(dir_ + "sweep.svg"), 1000u) << out;
    }
}

TEST_F(BenchE2eServe, AaRunReportsNoDifference) {
    ServeProcess serve(dir_ + "serve_aa.log");
    ASSERT_FALSE(serve.url().empty()) << serve.log();
    // A 1% family-wise error rate plus one retry: an A/A test has a small false-alarm rate by
    // design.
    std::string out;
    for (int attempt = 0; attempt < 2; ++attempt) {
        const std::string log = dir_ + "aa.log";
        ASSERT_EQ(run_cli("bench --url " + serve.url() + " --ab " + serve.url() +
                              " --conc 1,2 --n 4 --max-tokens 4 --iterations 3 --warmup 1 "
                              "--input-len 8 --confidence 0.99 --no-progress --plot none",
                          log),
                  0)
            << slurp(log);
        out = slurp(log);
        if (out.find("  faster") == std::string::npos && out.find("  slower") == std::string::npos) {
            break;
        }
    }
    EXPECT_NE(out.find("no detectable difference"), std::string::npos) << out;
    EXPECT_EQ(out.find("  faster"), std::string::npos) << out;
    EXPECT_EQ(out.find("  slower"), std::string::npos) << out;
}

}  // namespace
}  // namespace dsv4::bench
