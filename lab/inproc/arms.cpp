// prefill-lab in-process arms: the same step measured four ways inside one process with libllama's public API
// (plus the lab's llama_memory_seq_fake_prefix), so no server bookkeeping is in the numbers:
//   baseline  decode L + new from an empty sequence (timed whole)
//   genuine   decode L (untimed), then time the decode of the new tokens
//   fake      llama_memory_seq_fake_prefix(L) (timed: prep_ms), then time the new tokens
//   restore   a state blob of the depth-L prefix, captured once per L with flags 0 (attention KV and recurrent
//             state); per rep the sequence is removed, llama_state_seq_set_data_ext is timed (prep_ms, the
//             cache-read term), then the new tokens are timed, then a plain memcpy of as many bytes (copy_ms:
//             this host's copy bandwidth at the blob's size, the yardstick for the restore)
// Every arm starts from llama_memory_seq_rm of the whole sequence. Threads, batch and flash attention are the
// server's (-t, -tb, --ubatch, --flash-attn); like llama-server, no threadpool is attached. The tokens come
// from --tokens (whitespace-separated ids, "-" for stdin; the first L + new of them), else a seeded filler.
// After fake and restore the sequence's max position must be L-1 (the hybrid reports the lower of its two
// children), else the sample fails with the reason. Reps are interleaved in a rotating arm order.
// Output (JSON lines on --out):
//   {"kind":"meta",...}
//   {"kind":"sample","L":..,"new":..,"arm":..,"rep":..,"ok":..,"reason":..,"decode_ms":..,"prep_ms":..,
//    "copy_ms":..,"blob_bytes":..,"pos_max":..}
// Bad input (L + new beyond the context, a memory type without the fake op) exits 2 with one line on stderr;
// --check stops after those checks (model loaded, context created), measuring and writing nothing.
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

double now_ms() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

std::vector<int> ints(const std::string & s) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (!item.empty()) {
            out.push_back(std::atoi(item.c_str()));
        }
    }
    return out;
}

struct Args {
    std::string model;
    std::string out;
    std::string tokens;
    std::string flash_attn = "auto";
    std::vector<int> Ls{512};
    std::vector<int> news{64};
    std::vector<std::string> arms{"baseline", "fake", "genuine", "restore"};
    int reps = 3;
    int first_rep = 0;
    int n_ctx = 0;
    int ubatch = 512;
    int threads = 2;
    int threads_batch = 0;
    uint64_t seed = 1;
    bool check = false;
};

[[noreturn]] void fail(const std::string & why) {
    fprintf(stderr, "%s\n", why.c_str());
    exit(2);
}

Args parse(int argc, char ** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) {
                fail("option " + k + " needs a value");
            }
            return argv[++i];
        };
        if (k == "--model") {
            a.model = val();
        } else if (k == "--out") {
            a.out = val();
        } else if (k == "--Ls") {
            a.Ls = ints(val());
        } else if (k == "--news") {
            a.news = ints(val());
        } else if (k == "--arms") {
            a.arms.clear();
            std::stringstream ss(val());
            std::string item;
            while (std::getline(ss, item, ',')) {
                a.arms.push_back(item);
            }
        } else if (k == "--reps") {
            a.reps = std::atoi(val().c_str());
        } else if (k == "--first-rep") {
            a.first_rep = std::atoi(val().c_str());
        } else if (k == "--n-ctx") {
            a.n_ctx = std::atoi(val().c_str());
        } else if (k == "--ubatch") {
            a.ubatch = std::atoi(val().c_str());
        } else if (k == "-t" || k == "--threads") {
            a.threads = std::atoi(val().c_str());
        } else if (k == "-tb" || k == "--threads-batch") {
            a.threads_batch = std::atoi(val().c_str());
        } else if (k == "--tokens") {
            a.tokens = val();
        } else if (k == "--flash-attn") {
            a.flash_attn = val();
        } else if (k == "--check") {
            a.check = true;
        } else if (k == "--seed") {
            a.seed = std::strtoull(val().c_str(), nullptr, 10);
        } else {
            fail("unknown option " + k);
        }
    }
    if (a.check && a.out.empty()) {
        a.out = "-";
    }
    if (a.model.empty() || a.out.empty()) {
        fail("usage: lab-inproc-arms --model M --out F [--Ls 512,2048] [--news 64] [--reps 3] [--arms ...]");
    }
    for (const auto & arm : a.arms) {
        if (arm != "baseline" && arm != "fake" && arm != "genuine" && arm != "restore") {
            fail("unknown arm " + arm + " (baseline, fake, genuine, restore)");
        }
    }
    int need = 0;
    for (int L : a.Ls) {
        for (int n : a.news) {
            if (L < 1 || n < 1) {
                fail("L and new must be positive");
            }
            need = std::max(need, L + n);
        }
    }
    if (a.n_ctx <= 0) {
        a.n_ctx = need;
    }
    if (need > a.n_ctx) {
        fail("L + new = " + std::to_string(need) + " does not fit the context (" + std::to_string(a.n_ctx) + ")");
    }
    if (a.reps < 1 || a.first_rep < 0 || a.threads < 1 || a.ubatch < 1 || a.threads_batch < 0) {
        fail("--reps, --threads, --threads-batch and --ubatch must be positive (and --first-rep >= 0)");
    }
    if (a.flash_attn != "on" && a.flash_attn != "off" && a.flash_attn != "auto") {
        fail("--flash-attn is on, off or auto, not " + a.flash_attn);
    }
    return a;
}

// the ids of --tokens (a file, or "-": stdin); exits 2 on a bad id or too few of them
std::vector<llama_token> read_tokens(const std::string & path, int need, int n_vocab) {
    std::ifstream file;
    if (path != "-") {
        file.open(path);
        if (!file) {
            fail("cannot read the tokens file " + path);
        }
    }
    std::istream & in = path == "-" ? std::cin : file;
    std::vector<llama_token> out;
    long long id = 0;
    while ((int) out.size() < need && in >> id) {
        if (id < 0 || id >= n_vocab) {
            fail("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab) + ")");
        }
        out.push_back((llama_token) id);
    }
    if ((int) out.size() < need) {
        fail("--tokens holds " + std::to_string(out.size()) + " ids, L + new needs " + std::to_string(need));
    }
    return out;
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// decode tokens[p0, p1) at their own positions, in ubatch-sized batches; false on a decode error
bool decode(llama_context * ctx, llama_batch & batch, const std::vector<llama_token> & tokens, int p0, int p1,
            int ubatch) {
    for (int start = p0; start < p1; start += ubatch) {
        const int n = std::min(ubatch, p1 - start);
        batch.n_tokens = n;
        for (int i = 0; i < n; ++i) {
            batch.token[i] = tokens[start + i];
            batch.pos[i] = start + i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = start + i == p1 - 1;
        }
        if (llama_decode(ctx, batch) != 0) {
            return false;
        }
    }
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    const Args args = parse(argc, argv);
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = [](float, void *) { return true; };  // no loading dots on stderr
    llama_model * model = llama_model_load_from_file(args.model.c_str(), mp);
    if (!model) {
        fail("failed to load the model " + args.model);
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) args.n_ctx;
    cp.n_batch = (uint32_t) args.ubatch;
    cp.n_ubatch = (uint32_t) args.ubatch;
    cp.n_seq_max = 1;
    cp.n_threads = args.threads;
    cp.n_threads_batch = args.threads_batch > 0 ? args.threads_batch : args.threads;
    cp.flash_attn_type = args.flash_attn == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : args.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                    : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fail("failed to create a context of " + std::to_string(args.n_ctx) + " tokens");
    }
    llama_memory_t mem = llama_get_memory(ctx);
    const bool wants_fake = std::find(args.arms.begin(), args.arms.end(), "fake") != args.arms.end();
    if (wants_fake && !llama_memory_seq_fake_prefix(mem, 0, 0)) {
        fail("this model's memory type has no fake-prefix op (an iSWA cache?): drop the fake arm");
    }
    if (args.check) {  // the inputs, the model, the context and the arms are fine: measure nothing
        llama_free(ctx);
        llama_model_free(model);
        return 0;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int max_len = 0;
    for (int L : args.Ls) {
        for (int n : args.news) {
            max_len = std::max(max_len, L + n);
        }
    }
    std::vector<llama_token> tokens((size_t) max_len);
    if (!args.tokens.empty()) {
        tokens = read_tokens(args.tokens, max_len, n_vocab);
    } else {
        uint64_t x = args.seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const int lo = std::min(1000, n_vocab / 2), hi = std::max(lo + 1, (int) (n_vocab * 0.98));
        for (auto & t : tokens) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            t = lo + (int) ((x >> 33) % (uint64_t) (hi - lo));
        }
    }
    FILE * out = fopen(args.out.c_str(), "a");
    if (!out) {
        fail("cannot write " + args.out);
    }
    llama_batch batch = llama_batch_init(args.ubatch, 0, 1);
    volatile uint8_t sink = 0;
    fprintf(out,
            "{\"kind\":\"meta\",\"n_ctx\":%d,\"ubatch\":%d,\"threads\":%d,\"threads_batch\":%d,"
            "\"flash_attn\":\"%s\",\"n_vocab\":%d,\"tokens\":\"%s\"}\n",
            args.n_ctx, args.ubatch, args.threads, (int) cp.n_threads_batch, args.flash_attn.c_str(), n_vocab,
            args.tokens.empty() ? "seeded filler" : "given");
    fflush(out);

    for (int L : args.Ls) {
        std::vector<uint8_t> blob;  // the depth-L prefix's state, captured once per L
        std::vector<uint8_t> copy;  // the memcpy probe's destination, as large as the blob
        for (int n_new : args.news) {
            for (int rep = args.first_rep; rep < args.reps; ++rep) {
                const size_t k = args.arms.size();
                for (size_t j = 0; j < k; ++j) {
                    const std::string & arm = args.arms[(j + (size_t) rep) % k];
                    llama_memory_seq_rm(mem, 0, -1, -1);
                    bool ok = true;
                    std::string reason;
                    double prep = 0.0;
                    if (arm == "restore" && blob.empty()) {
                        if (!decode(ctx, batch, tokens, 0, L, args.ubatch)) {
                            ok = false;
                            reason = "decoding the prefix to capture failed";
                        } else {
                            blob.resize(llama_state_seq_get_size_ext(ctx, 0, LLAMA_STATE_SEQ_FLAGS_NONE));
                            const size_t got = llama_state_seq_get_data_ext(ctx, blob.data(), blob.size(), 0,
                                                                            LLAMA_STATE_SEQ_FLAGS_NONE);
                            if (got == 0) {
                                ok = false;
                                reason = "llama_state_seq_get_data_ext returned 0";
                                blob.clear();
                            }
                            copy.assign(blob.size(), 0);
                        }
                        llama_memory_seq_rm(mem, 0, -1, -1);
                    }
                    double t0 = 0.0;
                    int from = L;
                    if (ok && arm == "baseline") {
                        from = 0;
                    } else if (ok && arm == "genuine") {
                        ok = decode(ctx, batch, tokens, 0, L, args.ubatch);
                        reason = ok ? "" : "decoding the genuine prefix failed";
                    } else if (ok && arm == "fake") {
                        t0 = now_ms();
                        ok = llama_memory_seq_fake_prefix(mem, 0, (uint32_t) L);
                        prep = now_ms() - t0;
                        reason = ok ? "" : "llama_memory_seq_fake_prefix refused (no room?)";
                    } else if (ok && arm == "restore") {
                        t0 = now_ms();
                        ok = llama_state_seq_set_data_ext(ctx, blob.data(), blob.size(), 0,
                                                          LLAMA_STATE_SEQ_FLAGS_NONE) == blob.size();
                        prep = now_ms() - t0;
                        reason = ok ? "" : "llama_state_seq_set_data_ext did not read the whole blob";
                    }
                    const llama_pos pos_max = llama_memory_seq_pos_max(mem, 0);
                    if (ok && from == L && pos_max != L - 1) {
                        ok = false;
                        reason = "the sequence's max position is " + std::to_string(pos_max) + ", not L-1";
                    }
                    double decode_ms = 0.0;
                    if (ok) {
                        t0 = now_ms();
                        ok = decode(ctx, batch, tokens, from, L + n_new, args.ubatch);
                        decode_ms = now_ms() - t0;
                        reason = ok ? "" : "llama_decode failed";
                    }
                    double copy_ms = 0.0;
                    if (ok && arm == "restore") {
                        t0 = now_ms();
                        std::memcpy(copy.data(), blob.data(), blob.size());
                        copy_ms = now_ms() - t0;
                        sink = sink + copy[copy.size() / 2];  // the copy is read, so it cannot be elided
                    }
                    fprintf(out,
                            "{\"kind\":\"sample\",\"L\":%d,\"new\":%d,\"arm\":\"%s\",\"rep\":%d,\"ok\":%s,"
                            "\"reason\":\"%s\",\"decode_ms\":%.4f,\"prep_ms\":%.4f,\"copy_ms\":%.4f,"
                            "\"blob_bytes\":%zu,\"pos_max\":%d}\n",
                            L, n_new, arm.c_str(), rep, ok ? "true" : "false", reason.c_str(), decode_ms, prep,
                            copy_ms, arm == "restore" ? blob.size() : (size_t) 0, (int) pos_max);
                    fflush(out);
                }
            }
        }
    }
    fclose(out);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
