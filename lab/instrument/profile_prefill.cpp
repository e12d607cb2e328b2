// prefill-lab per-node prefill profiler, linked against the engine's libllama; no llama.cpp edit.
//
// Cumulative depth sweep: the context is decoded in fixed chunks, chunk c covering positions
// [c*chunk, (c+1)*chunk), so chunk c is a probe at depth c*chunk. Each cycle runs two passes over the same
// depths from an empty memory:
//   FUSED  cb_eval never observes: the scheduler fuses nodes at native speed; the clock wraps llama_decode.
//   TIMED  cb_eval asks for every node: each node is computed alone and synchronised; the clock wraps it.
// Output: JSON lines on --out, one per (pass row):
//   {"kind":"meta", ...}
//   {"kind":"fused","cycle":k,"depth":d,"ms":x}
//   {"kind":"timed","cycle":k,"depth":d,"ms":x}                       (llama_decode wall in TIMED mode)
//   {"kind":"node","cycle":k,"depth":d,"name":..,"op":..,"src0":..,"ne":[..],"ms":x,"calls":n}
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

double now_ms() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

struct NodeAcc {
    std::string op;
    std::string src0;
    int64_t ne[4] = {0, 0, 0, 0};
    double ms = 0.0;
    int calls = 0;
};

struct CbData {
    bool timed = false;
    double t_ask = 0.0;
    std::map<std::pair<std::string, std::string>, NodeAcc> acc;  // per chunk, keyed by (node name, op)
};

bool cb_eval(ggml_tensor * t, bool ask, void * user) {
    auto * d = static_cast<CbData *>(user);
    if (!d->timed) {
        return false;  // FUSED: never observe, nodes fuse
    }
    if (ask) {
        d->t_ask = now_ms();  // TIMED: isolate this node
        return true;
    }
    const double dt = now_ms() - d->t_ask;
    const std::string name = t->name[0] ? t->name : ggml_op_name(t->op);
    auto & a = d->acc[{name, ggml_op_desc(t)}];
    if (a.calls == 0) {
        a.op = ggml_op_desc(t);
        a.src0 = (t->src[0] && t->src[0]->name[0]) ? t->src[0]->name : "";
        for (int i = 0; i < 4; ++i) {
            a.ne[i] = t->ne[i];
        }
    }
    a.ms += dt;
    a.calls += 1;
    return true;
}

std::string json_str(const std::string & s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

struct Args {
    std::string model;
    std::string out;
    int n_ctx = 0;
    int chunk = 512;
    int max_depth = 4096;
    int cycles = 3;
    int first_cycle = 0;  // resume: cycles [first_cycle, cycles) are run
    int warmup = 1;
    int threads = 2;
    int threads_batch = 0;
    uint64_t seed = 1;
    std::string flash_attn = "auto";
    bool threadpool = false;
};

[[noreturn]] void usage(const char * argv0) {
    fprintf(stderr,
            "usage: %s --model M --out F [--chunk 512] [--max-depth 4096] [--cycles 3] [-t 2] [-tb N]\n"
            "          [--n-ctx N] [--seed 1] [--flash-attn auto|on|off] [--warmup 1] [--threadpool]\n"
            "          [--first-cycle K]   (resume: run cycles K..cycles-1)\n",
            argv0);
    exit(2);
}

Args parse(int argc, char ** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage(argv[0]);
            }
            return argv[++i];
        };
        if (k == "--model" || k == "-m") {
            a.model = val();
        } else if (k == "--out" || k == "-o") {
            a.out = val();
        } else if (k == "--chunk") {
            a.chunk = std::atoi(val().c_str());
        } else if (k == "--max-depth") {
            a.max_depth = std::atoi(val().c_str());
        } else if (k == "--cycles") {
            a.cycles = std::atoi(val().c_str());
        } else if (k == "-t" || k == "--threads") {
            a.threads = std::atoi(val().c_str());
        } else if (k == "-tb" || k == "--threads-batch") {
            a.threads_batch = std::atoi(val().c_str());
        } else if (k == "--n-ctx") {
            a.n_ctx = std::atoi(val().c_str());
        } else if (k == "--warmup") {
            a.warmup = std::atoi(val().c_str());
        } else if (k == "--seed") {
            a.seed = std::strtoull(val().c_str(), nullptr, 10);
        } else if (k == "--first-cycle") {
            a.first_cycle = std::atoi(val().c_str());
        } else if (k == "--threadpool") {
            a.threadpool = true;
        } else if (k == "--flash-attn") {
            a.flash_attn = val();
        } else {
            usage(argv[0]);
        }
    }
    if (a.model.empty() || a.out.empty() || a.chunk < 1 || a.max_depth < 0 || a.cycles < 1 || a.threads < 1 ||
        a.first_cycle < 0 || a.first_cycle >= a.cycles) {
        usage(argv[0]);
    }
    if (a.threads_batch < 1) {
        a.threads_batch = a.threads;
    }
    if (a.n_ctx <= 0) {
        a.n_ctx = a.max_depth + a.chunk;
    }
    return a;
}

// chunk c of the filler: positions [c*chunk, (c+1)*chunk), logits for the last token only
void fill_chunk(llama_batch & batch, const std::vector<llama_token> & tokens, int c, int chunk) {
    batch.n_tokens = chunk;
    for (int i = 0; i < chunk; ++i) {
        batch.token[i] = tokens[(size_t) c * chunk + i];
        batch.pos[i] = c * chunk + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == chunk - 1;
    }
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

}  // namespace

int main(int argc, char ** argv) {
    const Args args = parse(argc, argv);
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(args.model.c_str(), mp);
    if (!model) {
        fprintf(stderr, "failed to load %s\n", args.model.c_str());
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    CbData cbd;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) args.n_ctx;
    cp.n_batch = (uint32_t) args.chunk;
    cp.n_ubatch = (uint32_t) args.chunk;
    cp.n_seq_max = 1;
    cp.n_threads = args.threads;
    cp.n_threads_batch = args.threads_batch;
    cp.cb_eval = cb_eval;
    cp.cb_eval_user_data = &cbd;
    cp.no_perf = true;
    cp.flash_attn_type = args.flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : args.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                    : LLAMA_FLASH_ATTN_TYPE_AUTO;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "failed to create the context\n");
        return 1;
    }

    // By default no threadpool is attached, like llama-server at the pin: ggml-cpu then starts and joins its
    // worker threads on every graph compute. --threadpool attaches a persistent polling one, like llama-bench.
    ggml_backend_reg_t cpu_reg = ggml_backend_dev_backend_reg(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    auto * threadpool_new = (decltype(ggml_threadpool_new) *) ggml_backend_reg_get_proc_address(cpu_reg, "ggml_threadpool_new");
    auto * threadpool_free = (decltype(ggml_threadpool_free) *) ggml_backend_reg_get_proc_address(cpu_reg, "ggml_threadpool_free");
    ggml_threadpool * tp = nullptr;
    ggml_threadpool * tp_batch = nullptr;
    if (args.threadpool && threadpool_new && threadpool_free) {
        ggml_threadpool_params tpp = ggml_threadpool_params_default(args.threads);
        tp = threadpool_new(&tpp);
        if (args.threads_batch != args.threads) {
            ggml_threadpool_params tppb = ggml_threadpool_params_default(args.threads_batch);
            tp_batch = threadpool_new(&tppb);
        }
        llama_attach_threadpool(ctx, tp, tp_batch);
    }

    FILE * out = fopen(args.out.c_str(), "w");
    if (!out) {
        fprintf(stderr, "cannot write %s\n", args.out.c_str());
        return 1;
    }

    // deterministic filler ids spread across the ordinary vocabulary (MoE routing resembles text)
    const int n_chunks = args.max_depth / args.chunk + 1;
    const int lo = 1000;
    const int hi = std::max(lo + 1, (int) (n_vocab * 0.98));
    std::vector<llama_token> tokens((size_t) n_chunks * args.chunk);
    uint64_t x = args.seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (auto & t : tokens) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        t = lo + (llama_token) ((x >> 33) % (uint64_t) (hi - lo));
    }

    fprintf(out,
            "{\"kind\":\"meta\",\"n_vocab\":%d,\"n_layer\":%d,\"chunk\":%d,\"max_depth\":%d,\"cycles\":%d,"
            "\"threads\":%d,\"threads_batch\":%d,\"threadpool\":%s,\"n_ctx\":%d,\"flash_attn\":%s,\"system_info\":%s}\n",
            n_vocab, llama_model_n_layer(model), args.chunk, (n_chunks - 1) * args.chunk, args.cycles, args.threads,
            args.threads_batch, tp ? "true" : "false", args.n_ctx, json_str(args.flash_attn).c_str(), json_str(llama_print_system_info()).c_str());

    llama_batch batch = llama_batch_init(args.chunk, 0, 1);
    llama_memory_t mem = llama_get_memory(ctx);

    // warm-up: one untimed chunk, so one-time costs (weight repacking, first allocations) stay out of depth 0
    for (int w = 0; w < args.warmup; ++w) {
        fill_chunk(batch, tokens, 0, args.chunk);
        if (llama_decode(ctx, batch) != 0) {
            fprintf(stderr, "warm-up decode failed\n");
            return 1;
        }
        llama_memory_clear(mem, true);
    }

    for (int cycle = args.first_cycle; cycle < args.cycles; ++cycle) {
        for (int pass = 0; pass < 2; ++pass) {
            const bool timed = pass == 1;
            llama_memory_clear(mem, true);
            for (int c = 0; c < n_chunks; ++c) {
                fill_chunk(batch, tokens, c, args.chunk);
                cbd.timed = timed;
                cbd.acc.clear();
                const double t0 = now_ms();
                const int rc = llama_decode(ctx, batch);
                const double ms = now_ms() - t0;
                cbd.timed = false;
                if (rc != 0) {
                    fprintf(stderr, "llama_decode failed (%d) at depth %d\n", rc, c * args.chunk);
                    return 1;
                }
                const int depth = c * args.chunk;
                fprintf(out, "{\"kind\":\"%s\",\"cycle\":%d,\"depth\":%d,\"ms\":%.6f}\n", timed ? "timed" : "fused",
                        cycle, depth, ms);
                for (const auto & [key, a] : cbd.acc) {
                    const std::string & name = key.first;
                    fprintf(out,
                            "{\"kind\":\"node\",\"cycle\":%d,\"depth\":%d,\"name\":%s,\"op\":%s,\"src0\":%s,"
                            "\"ne\":[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "],\"ms\":%.6f,\"calls\":%d}\n",
                            cycle, depth, json_str(name).c_str(), json_str(a.op).c_str(), json_str(a.src0).c_str(),
                            a.ne[0], a.ne[1], a.ne[2], a.ne[3], a.ms, a.calls);
                }
                fflush(out);
                fprintf(stderr, "progress cycle=%d pass=%s depth=%d ms=%.3f\n", cycle, timed ? "timed" : "fused",
                        depth, ms);
            }
        }
    }

    llama_batch_free(batch);
    fclose(out);
    llama_free(ctx);
    if (tp_batch) {
        threadpool_free(tp_batch);
    }
    if (tp) {
        threadpool_free(tp);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
