// prefill-lab's C++ tools (lab/instrument/profile_prefill.cpp, lab/inproc/driver.cpp): what both need, once.
// Header-only; the lab compiles each tool with -I for this folder and keys its build on this file too
// (lab.instrument.build_tool).
//
//   now_ms             the one clock (steady, milliseconds)
//   json_str           a JSON string literal, quoted and escaped: every string a tool prints in JSON goes through it
//   fail               one line on stderr, exit 2 (bad input, a model or context that cannot be had, a failed step)
//   CommonArgs,        the options both tools take (--model, --n-ctx, -t, -tb, --seed, --flash-attn, --threadpool,
//                      --swa-full, -ctk, -ctv)
//     ArgReader        and a small reader of argv that knows them; each tool reads its own options beside them
//   quiet_log          warnings and errors reach stderr, nothing below them
//   filler_tokens      the seeded filler stream, ids in [min(1000, n_vocab/2), 0.98 n_vocab)
//   fill_batch, Batch  one sequence's tokens at their own positions in a llama_batch (owned by Batch)
//   Engine             the model, its context (with an optional cb_eval) and the threadpool policy, freed in order
#pragma once

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace labtool {

inline double now_ms() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

// a JSON string literal: quoted, with quotes, backslashes and control characters escaped (UTF-8 passes through)
inline std::string json_str(const std::string & s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if ((unsigned char) c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof buf, "\\u%04x", (unsigned) c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

[[noreturn]] inline void fail(const std::string & why) {
    fprintf(stderr, "%s\n", why.c_str());
    exit(2);
}

// the options both tools take, with the same names, defaults and checks
struct CommonArgs {
    std::string model;
    int n_ctx = 0;          // 0: the tool's own default (what its grid or depths need)
    int threads = 2;        // -t: single-token decodes
    int threads_batch = 0;  // -tb: batches (every prefill chunk); 0: as -t
    uint64_t seed = 1;      // the filler's seed
    std::string flash_attn = "auto";
    bool threadpool = false;  // a persistent polling threadpool, as llama-bench attaches (Engine)
    bool swa_full = false;    // --swa-full: a sliding-window cache as large as the context (as llama-server's)
    std::string cache_type_k = "f16";  // -ctk: the K cache's type (as llama-server's)
    std::string cache_type_v = "f16";  // -ctv: the V cache's type
};

// a KV cache type by llama-server's name for it (-ctk / -ctv), or exit 2 naming the ones it takes
inline ggml_type kv_type(const std::string & name) {
    static const std::pair<const char *, ggml_type> types[] = {
        {"f32", GGML_TYPE_F32},       {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
        {"q8_0", GGML_TYPE_Q8_0},     {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"iq4_nl", GGML_TYPE_IQ4_NL}, {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
    };
    for (const auto & [n, t] : types) {
        if (name == n) {
            return t;
        }
    }
    fail("a KV cache type is f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1, not " + name);
}

// argv, one option at a time: `while (r.next()) { if (!r.common(a.common) && r.key() == "--x") ... }`
class ArgReader {
  public:
    ArgReader(int argc, char ** argv, std::string usage) :
        argc_(argc),
        argv_(argv),
        usage_(std::move(usage)) {}

    bool next() {
        if (i_ + 1 >= argc_) {
            return false;
        }
        key_ = argv_[++i_];
        return true;
    }

    const std::string & key() const { return key_; }

    std::string value() {
        if (i_ + 1 >= argc_) {
            fail("option " + key_ + " needs a value");
        }
        return argv_[++i_];
    }

    // a whole number of at least `min`
    int int_value(int min) {
        const std::string v = value();
        char * end = nullptr;
        errno = 0;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno != 0 || n < min || n > INT32_MAX) {
            fail(key_ + " takes a whole number of at least " + std::to_string(min) + ", not '" + v + "'");
        }
        return (int) n;
    }

    uint64_t u64_value() {
        const std::string v = value();
        char * end = nullptr;
        errno = 0;
        const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || v[0] == '-' || *end != '\0' || errno != 0) {
            fail(key_ + " takes a whole number, not '" + v + "'");
        }
        return (uint64_t) n;
    }

    // the current option, if it is one of the shared ones (then read into `a`)
    bool common(CommonArgs & a) {
        if (key_ == "--model" || key_ == "-m") {
            a.model = value();
        } else if (key_ == "--n-ctx") {
            a.n_ctx = int_value(0);
        } else if (key_ == "-t" || key_ == "--threads") {
            a.threads = int_value(1);
        } else if (key_ == "-tb" || key_ == "--threads-batch") {
            a.threads_batch = int_value(0);
        } else if (key_ == "--seed") {
            a.seed = u64_value();
        } else if (key_ == "--flash-attn") {
            a.flash_attn = value();
        } else if (key_ == "--threadpool") {
            a.threadpool = true;
        } else if (key_ == "--swa-full") {
            a.swa_full = true;
        } else if (key_ == "-ctk" || key_ == "--cache-type-k") {
            a.cache_type_k = value();
        } else if (key_ == "-ctv" || key_ == "--cache-type-v") {
            a.cache_type_v = value();
        } else {
            return false;
        }
        return true;
    }

    [[noreturn]] void unknown() const { fail("unknown option " + key_ + "; " + usage_); }

    [[noreturn]] void usage() const { fail(usage_); }

    // after the last option: the model is given, flash attention is on, off or auto, -tb defaults to -t
    void finish(CommonArgs & a) const {
        if (a.model.empty()) {
            usage();
        }
        if (a.flash_attn != "on" && a.flash_attn != "off" && a.flash_attn != "auto") {
            fail("--flash-attn is on, off or auto, not " + a.flash_attn);
        }
        if (a.threads_batch == 0) {
            a.threads_batch = a.threads;
        }
        kv_type(a.cache_type_k);
        kv_type(a.cache_type_v);
    }

  private:
    int argc_;
    char ** argv_;
    std::string usage_;
    int i_ = 0;
    std::string key_;
};

// warnings and errors, nothing below them; a continuation line (GGML_LOG_LEVEL_CONT, e.g. the loading dots)
// follows the level of the line it continues
inline void quiet_log(ggml_log_level level, const char * text, void *) {
    static ggml_log_level last = GGML_LOG_LEVEL_INFO;
    if (level != GGML_LOG_LEVEL_CONT) {
        last = level;
    }
    if (last >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

// n deterministic filler ids spread across the ordinary vocabulary (MoE routing resembles text's), clear of the
// low ids where special and byte tokens sit: [min(1000, n_vocab/2), 0.98 n_vocab), valid for any vocabulary
inline std::vector<llama_token> filler_tokens(int n, uint64_t seed, int n_vocab) {
    std::vector<llama_token> out((size_t) n);
    const int lo = std::min(1000, n_vocab / 2);
    const int hi = std::max(lo + 1, (int) (n_vocab * 0.98));
    uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (auto & t : out) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        t = lo + (llama_token) ((x >> 33) % (uint64_t) (hi - lo));
    }
    return out;
}

// tokens[start, start + n) at their own positions in sequence 0; logits for the last of them if `logits`
inline void fill_batch(llama_batch & batch, const std::vector<llama_token> & tokens, int start, int n, bool logits) {
    batch.n_tokens = n;
    for (int i = 0; i < n; ++i) {
        batch.token[i] = tokens[(size_t) start + i];
        batch.pos[i] = start + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = logits && i == n - 1;
    }
}

// a llama_batch of up to n tokens of one sequence, freed with its owner
struct Batch {
    explicit Batch(int n) :
        b(llama_batch_init(n, 0, 1)) {}
    ~Batch() { llama_batch_free(b); }
    Batch(const Batch &) = delete;
    Batch & operator=(const Batch &) = delete;
    llama_batch b;
};

// The model (CPU only, no loading dots), one context of n_ctx tokens decoding up to n_batch at a time, and the
// threadpool policy. Any failure is fail(): one line, exit 2.
//
// Threadpool: none by default, like llama-server at the pin, so ggml-cpu starts and joins its workers on every
// graph compute. --threadpool attaches persistent polling ones, as llama-bench does: one pool of -t threads for
// both kinds of decode, or, when -tb differs from -t, a second pool of -tb threads for batches (as llama-cli
// attaches them), so each decode runs on a pool of exactly the threads llama_context asks of it (a smaller pool
// would cap the threads, or overrun the pool in an OpenMP build). Every prefill chunk and every timed step of
// more than one token is a batch, so both tools measure on a pool of -tb threads, as before. A CPU backend that
// exports no threadpool fails loudly: a run that asked for one never measures without it.
class Engine {
  public:
    Engine(const CommonArgs & a, int n_ctx, int n_batch, ggml_backend_sched_eval_callback cb_eval = nullptr,
           void * cb_eval_user_data = nullptr) {
        llama_log_set(quiet_log, nullptr);
        llama_backend_init();
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        mp.progress_callback = [](float, void *) { return true; };  // no loading dots on stderr
        model = llama_model_load_from_file(a.model.c_str(), mp);
        if (!model) {
            fail("failed to load the model " + a.model);
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = (uint32_t) n_ctx;
        cp.n_batch = (uint32_t) n_batch;
        cp.n_ubatch = (uint32_t) n_batch;
        cp.n_seq_max = 1;
        cp.swa_full = a.swa_full;
        cp.n_threads = a.threads;
        cp.n_threads_batch = a.threads_batch;
        cp.flash_attn_type = a.flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                             : a.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                     : LLAMA_FLASH_ATTN_TYPE_AUTO;
        cp.type_k = kv_type(a.cache_type_k);
        cp.type_v = kv_type(a.cache_type_v);
        cp.cb_eval = cb_eval;
        cp.cb_eval_user_data = cb_eval_user_data;
        cp.no_perf = true;
        ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            fail("failed to create a context of " + std::to_string(n_ctx) + " tokens");
        }
        if (a.threadpool) {
            attach_threadpool(a.threads, a.threads_batch);
        }
    }

    ~Engine() {
        llama_free(ctx);
        if (tp_free_) {
            tp_free_(tp_batch_);  // ggml_threadpool_free ignores a null pool
            tp_free_(tp_);
        }
        llama_model_free(model);
        llama_backend_free();
    }

    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    llama_memory_t memory() const { return llama_get_memory(ctx); }

    int n_vocab() const { return llama_vocab_n_tokens(llama_model_get_vocab(model)); }

    bool has_threadpool() const { return tp_ != nullptr; }

    llama_model * model = nullptr;
    llama_context * ctx = nullptr;

  private:
    void attach_threadpool(int threads, int threads_batch) {
        ggml_backend_reg_t cpu = ggml_backend_dev_backend_reg(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
        auto * tp_new = (decltype(ggml_threadpool_new) *) ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_new");
        tp_free_ = (decltype(ggml_threadpool_free) *) ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_free");
        if (!tp_new || !tp_free_) {
            fail("--threadpool: this build's CPU backend exports no threadpool");
        }
        ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
        tp_ = tp_new(&tpp);
        if (tp_ && threads_batch != threads) {
            ggml_threadpool_params tppb = ggml_threadpool_params_default(threads_batch);
            tp_batch_ = tp_new(&tppb);
        }
        if (!tp_ || (threads_batch != threads && !tp_batch_)) {
            fail("--threadpool: creating a threadpool of " + std::to_string(std::max(threads, threads_batch)) +
                 " threads failed");
        }
        llama_attach_threadpool(ctx, tp_, tp_batch_);  // a null batch pool: the one pool serves batches too
    }

    decltype(ggml_threadpool_free) * tp_free_ = nullptr;
    ggml_threadpool * tp_ = nullptr;
    ggml_threadpool * tp_batch_ = nullptr;
};

}  // namespace labtool
