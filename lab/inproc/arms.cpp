// prefill-lab in-process arms: one step measured several ways inside one long-lived process with libllama's
// public API (plus the lab's llama_memory_seq_fake_prefix), so no server bookkeeping is in the numbers and no
// rep pays for its prefix. The grid's points share one token stream: point (L, new) is stream[0, L) as its
// prefix and stream[L, L + new) as its new tokens.
//
// Commands, one per line on stdin; each answers with JSON lines on stdout ending in {"kind":"done"}:
//   fill P          one cumulative pass (number P) through the stream: decode up to each grid L in turn, keep a
//                   state blob of the really decoded depth-L prefix (flags 0: attention KV and recurrent
//                   state), and time a chunk of each grid `new` at depth L after restoring that blob.
//                   {"kind":"fill","pass":P,"L":..,"from":..,"ms":..,"capture_ms":..,"blob_bytes":..}: the
//                   segment from the previous L to this one (prefix sums give the time to reach L from empty);
//                   {"kind":"chunk","pass":P,"L":..,"new":..,"ms":..}: the new tokens at depth L.
//   rep L N R ARMS  rep R of point (L, N), the comma-separated arms in the given order:
//     baseline  decode L + new from an empty sequence (timed whole)
//     fake      llama_memory_seq_fake_prefix(L) (prep_ms), then time the new tokens
//     genuine   restore the depth-L blob of the last fill (prep_ms: the cache read), then time the new tokens,
//               then a plain memcpy of as many bytes (copy_ms: the yardstick for the cache read)
//     plain     decode L (untimed), then time the new tokens: the genuine hit without a saved state
//     warmup    the genuine arm untimed (a sample row like the others): after another process measured on the
//               same cores this one's caches are cold, and a shorter warm-up left the next chunk ~10% slow
//   {"kind":"sample","L":..,"new":..,"arm":..,"rep":..,"ok":..,"reason":..,"decode_ms":..,"prep_ms":..,
//    "copy_ms":..,"blob_bytes":..,"pos_max":..}
//   quit            (or end of input)
// Every arm starts from llama_memory_seq_rm of the whole sequence. After fake, genuine and plain the sequence's
// max position must be L-1 (the hybrid reports the lower of its two children), else the sample fails with the
// reason. Threads, batch and flash attention are the server's (-t, -tb, --ubatch, --flash-attn); like
// llama-server, no threadpool is attached. Tokens come from --tokens FILE (whitespace-separated ids), else a
// seeded filler. The first line on stdout is {"kind":"meta",...}.
// Bad startup input (L + new beyond the context, a memory type without the fake op, bad token ids) exits 2 with
// one line on stderr; --check stops after those checks. A bad command answers {"kind":"error","reason":..}.
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "llama.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

double now_ms() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) {
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

std::vector<int> ints(const std::string & s) {
    std::vector<int> out;
    for (const auto & item : split(s, ',')) {
        out.push_back(std::atoi(item.c_str()));
    }
    return out;
}

struct Args {
    std::string model;
    std::string tokens;
    std::string flash_attn = "auto";
    std::vector<int> Ls{512};
    std::vector<int> news{64};
    int n_ctx = 0;
    int ubatch = 512;
    int threads = 2;
    int threads_batch = 0;
    uint64_t seed = 1;
    bool check = false;
    bool fake = true;  // --no-fake: the memory type need not support the fake op
    bool threadpool = false;  // --threadpool: a persistent polling threadpool, as llama-bench attaches
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
        } else if (k == "--Ls") {
            a.Ls = ints(val());
        } else if (k == "--news") {
            a.news = ints(val());
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
        } else if (k == "--no-fake") {
            a.fake = false;
        } else if (k == "--threadpool") {
            a.threadpool = true;
        } else if (k == "--seed") {
            a.seed = std::strtoull(val().c_str(), nullptr, 10);
        } else {
            fail("unknown option " + k);
        }
    }
    if (a.model.empty()) {
        fail("usage: lab-inproc-arms --model M [--Ls 512,2048] [--news 64] [--tokens FILE] [--check] < commands");
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
    if (a.threads < 1 || a.ubatch < 1 || a.threads_batch < 0) {
        fail("--threads, --threads-batch and --ubatch must be positive");
    }
    if (a.flash_attn != "on" && a.flash_attn != "off" && a.flash_attn != "auto") {
        fail("--flash-attn is on, off or auto, not " + a.flash_attn);
    }
    std::sort(a.Ls.begin(), a.Ls.end());
    a.Ls.erase(std::unique(a.Ls.begin(), a.Ls.end()), a.Ls.end());
    std::sort(a.news.begin(), a.news.end());
    a.news.erase(std::unique(a.news.begin(), a.news.end()), a.news.end());
    return a;
}

// the ids of the --tokens file; exits 2 on a bad id or too few of them
std::vector<llama_token> read_tokens(const std::string & path, int need, int n_vocab) {
    std::ifstream in(path);
    if (!in) {
        fail("cannot read the tokens file " + path);
    }
    std::vector<llama_token> out;
    long long id = 0;
    while ((int) out.size() < need && in >> id) {
        if (id < 0 || id >= n_vocab) {
            fail("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(n_vocab) + ")");
        }
        out.push_back((llama_token) id);
    }
    if ((int) out.size() < need) {
        fail("--tokens holds " + std::to_string(out.size()) + " ids, the grid needs " + std::to_string(need));
    }
    return out;
}

std::vector<llama_token> seeded_filler(int n, uint64_t seed, int n_vocab) {
    std::vector<llama_token> out((size_t) n);
    uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const int lo = std::min(1000, n_vocab / 2), hi = std::max(lo + 1, (int) (n_vocab * 0.98));
    for (auto & t : out) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        t = lo + (int) ((x >> 33) % (uint64_t) (hi - lo));
    }
    return out;
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// JSON string contents: quotes, backslashes and control characters escaped
std::string json_escape(const std::string & s) {
    std::string out;
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
    return out;
}

struct Sample {
    bool ok = true;
    std::string reason;
    double decode_ms = 0.0;
    double prep_ms = 0.0;
    double copy_ms = 0.0;
    size_t blob_bytes = 0;
    int pos_max = -1;
};

class Driver {
  public:
    Driver(llama_context * ctx, std::vector<llama_token> tokens, const Args & args) :
        ctx_(ctx),
        mem_(llama_get_memory(ctx)),
        tokens_(std::move(tokens)),
        args_(args),
        batch_(llama_batch_init(args.ubatch, 0, 1)) {}

    ~Driver() { llama_batch_free(batch_); }

    void fill(int pass) {
        llama_memory_seq_rm(mem_, 0, -1, -1);
        int pos = 0;
        for (const int L : args_.Ls) {
            double t0 = now_ms();
            if (!decode(pos, L)) {
                return error("decoding the stream from " + std::to_string(pos) + " to " + std::to_string(L) +
                             " failed");
            }
            const double ms = now_ms() - t0;
            t0 = now_ms();
            std::vector<uint8_t> & blob = blobs_[L];
            blob.resize(llama_state_seq_get_size_ext(ctx_, 0, LLAMA_STATE_SEQ_FLAGS_NONE));
            if (llama_state_seq_get_data_ext(ctx_, blob.data(), blob.size(), 0, LLAMA_STATE_SEQ_FLAGS_NONE) == 0) {
                blobs_.erase(L);
                return error("llama_state_seq_get_data_ext returned 0 at L=" + std::to_string(L));
            }
            const double capture_ms = now_ms() - t0;
            printf("{\"kind\":\"fill\",\"pass\":%d,\"L\":%d,\"from\":%d,\"ms\":%.4f,\"capture_ms\":%.4f,"
                   "\"blob_bytes\":%zu}\n",
                   pass, L, pos, ms, capture_ms, blob.size());
            for (const int n_new : args_.news) {
                Sample s;
                restore(L, s);
                if (s.ok) {
                    t0 = now_ms();
                    s.ok = decode(L, L + n_new);
                    s.decode_ms = now_ms() - t0;
                }
                printf("{\"kind\":\"chunk\",\"pass\":%d,\"L\":%d,\"new\":%d,\"ok\":%s,\"reason\":\"%s\",\"ms\":%.4f}\n",
                       pass, L, n_new, s.ok ? "true" : "false", json_escape(s.reason).c_str(), s.decode_ms);
            }
            Sample back;  // continue the stream from depth L
            restore(L, back);
            if (!back.ok) {
                return error(back.reason);
            }
            pos = L;
        }
    }

    void rep(int L, int n_new, int rep, const std::vector<std::string> & arms) {
        for (const auto & arm : arms) {
            llama_memory_seq_rm(mem_, 0, -1, -1);
            Sample s;
            int from = L;
            if (arm == "baseline") {
                from = 0;
            } else if (arm == "fake") {
                fake(L, s);
            } else if (arm == "genuine") {
                restore(L, s);
            } else if (arm == "plain") {
                s.ok = decode(0, L);
                s.reason = s.ok ? "" : "decoding the genuine prefix failed";
            } else if (arm == "warmup") {
                restore(L, s);  // then the same chunk: wakes this process's threads, caches and buffers
            }
            s.pos_max = (int) llama_memory_seq_pos_max(mem_, 0);
            if (s.ok && from == L && s.pos_max != L - 1) {
                s.ok = false;
                s.reason = "the sequence's max position is " + std::to_string(s.pos_max) + ", not L-1";
            }
            if (s.ok) {
                const double t0 = now_ms();
                s.ok = decode(from, L + n_new);
                s.decode_ms = now_ms() - t0;
                s.reason = s.ok ? "" : "llama_decode failed";
            }
            if (s.ok && arm == "genuine") {
                yardstick(L, s);
            }
            printf("{\"kind\":\"sample\",\"L\":%d,\"new\":%d,\"arm\":\"%s\",\"rep\":%d,\"ok\":%s,\"reason\":\"%s\","
                   "\"decode_ms\":%.4f,\"prep_ms\":%.4f,\"copy_ms\":%.4f,\"blob_bytes\":%zu,\"pos_max\":%d}\n",
                   L, n_new, arm.c_str(), rep, s.ok ? "true" : "false", json_escape(s.reason).c_str(), s.decode_ms,
                   s.prep_ms, s.copy_ms, s.blob_bytes, s.pos_max);
        }
    }

    void error(const std::string & why) {
        printf("{\"kind\":\"error\",\"reason\":\"%s\"}\n", json_escape(why).c_str());
    }

  private:
    // decode tokens[p0, p1) at their own positions, in ubatch-sized batches; false on a decode error
    bool decode(int p0, int p1) {
        for (int start = p0; start < p1; start += args_.ubatch) {
            const int n = std::min(args_.ubatch, p1 - start);
            batch_.n_tokens = n;
            for (int i = 0; i < n; ++i) {
                batch_.token[i] = tokens_[start + i];
                batch_.pos[i] = start + i;
                batch_.n_seq_id[i] = 1;
                batch_.seq_id[i][0] = 0;
                batch_.logits[i] = start + i == p1 - 1;
            }
            if (llama_decode(ctx_, batch_) != 0) {
                return false;
            }
        }
        return true;
    }

    void fake(int L, Sample & s) {
        const double t0 = now_ms();
        s.ok = llama_memory_seq_fake_prefix(mem_, 0, (uint32_t) L);
        s.prep_ms = now_ms() - t0;
        s.reason = s.ok ? "" : "llama_memory_seq_fake_prefix refused (no room?)";
    }

    // the sequence back to the really decoded depth-L state of the last fill (prep_ms: the cache read)
    void restore(int L, Sample & s) {
        const auto it = blobs_.find(L);
        if (it == blobs_.end()) {
            s.ok = false;
            s.reason = "no depth-" + std::to_string(L) + " state yet: send a fill first";
            return;
        }
        llama_memory_seq_rm(mem_, 0, -1, -1);
        const double t0 = now_ms();
        s.ok = llama_state_seq_set_data_ext(ctx_, it->second.data(), it->second.size(), 0,
                                            LLAMA_STATE_SEQ_FLAGS_NONE) == it->second.size();
        s.prep_ms = now_ms() - t0;
        s.blob_bytes = it->second.size();
        s.reason = s.ok ? "" : "llama_state_seq_set_data_ext did not read the whole blob";
    }

    // a plain memcpy of as many bytes as the blob: this host's copy bandwidth at that size
    void yardstick(int L, Sample & s) {
        const std::vector<uint8_t> & blob = blobs_[L];
        copy_.resize(blob.size());
        const double t0 = now_ms();
        std::memcpy(copy_.data(), blob.data(), blob.size());
        s.copy_ms = now_ms() - t0;
        sink_ = sink_ + copy_[copy_.size() / 2];  // the copy is read, so it cannot be elided
    }

    llama_context * ctx_;
    llama_memory_t mem_;
    std::vector<llama_token> tokens_;
    const Args & args_;
    llama_batch batch_;
    std::map<int, std::vector<uint8_t>> blobs_;
    std::vector<uint8_t> copy_;
    volatile uint8_t sink_ = 0;
};

bool in_grid(const std::vector<int> & values, int v) {
    return std::find(values.begin(), values.end(), v) != values.end();
}

// one command line; false on quit
bool serve_one(Driver & d, const Args & args, const std::string & line) {
    const std::vector<std::string> words = split(line, ' ');
    if (words.empty()) {
        return true;
    }
    if (words[0] == "quit") {
        return false;
    }
    if (words[0] == "fill" && words.size() == 2) {
        d.fill(std::atoi(words[1].c_str()));
    } else if (words[0] == "rep" && words.size() == 5) {
        const int L = std::atoi(words[1].c_str()), n_new = std::atoi(words[2].c_str());
        const std::vector<std::string> arms = split(words[4], ',');
        const bool known = std::all_of(arms.begin(), arms.end(), [](const std::string & a) {
            return a == "baseline" || a == "fake" || a == "genuine" || a == "plain" || a == "warmup";
        });
        if (!in_grid(args.Ls, L) || !in_grid(args.news, n_new)) {
            d.error("(" + words[1] + ", " + words[2] + ") is not a point of this driver's grid");
        } else if (!known || arms.empty()) {
            d.error("unknown arm in " + words[4] + " (baseline, fake, genuine, plain, warmup)");
        } else if (!args.fake && std::find(arms.begin(), arms.end(), "fake") != arms.end()) {
            d.error("started with --no-fake: no fake arm");
        } else {
            d.rep(L, n_new, std::atoi(words[3].c_str()), arms);
        }
    } else {
        d.error("unknown command: " + line.substr(0, 80) + " (fill P | rep L N R ARMS | quit)");
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
    // No threadpool by default, like llama-server: ggml-cpu starts and joins its workers on every graph compute.
    // --threadpool attaches a persistent polling one, as llama-bench does (to compare the two like for like).
    ggml_backend_reg_t cpu = ggml_backend_dev_backend_reg(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    using tp_new_t = decltype(ggml_threadpool_new);
    using tp_free_t = decltype(ggml_threadpool_free);
    auto * tp_new = (tp_new_t *) ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_new");
    auto * tp_free = (tp_free_t *) ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_free");
    ggml_threadpool * tp = nullptr;
    if (args.threadpool) {
        if (!tp_new || !tp_free) {
            fail("--threadpool: this build's CPU backend exports no threadpool");
        }
        ggml_threadpool_params tpp = ggml_threadpool_params_default((int) cp.n_threads_batch);
        tp = tp_new(&tpp);
        llama_attach_threadpool(ctx, tp, tp);
    }
    if (args.fake && !llama_memory_seq_fake_prefix(llama_get_memory(ctx), 0, 0)) {
        fail("this model's memory type has no fake-prefix op (an iSWA cache?): drop the fake arm");
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int need = args.Ls.back() + args.news.back();
    std::vector<llama_token> tokens = args.tokens.empty() ? seeded_filler(need, args.seed, n_vocab)
                                                          : read_tokens(args.tokens, need, n_vocab);
    if (!args.check) {  // --check: the inputs, the model, the context and the arms are fine; measure nothing
        printf("{\"kind\":\"meta\",\"n_ctx\":%d,\"ubatch\":%d,\"threads\":%d,\"threads_batch\":%d,"
               "\"flash_attn\":\"%s\",\"n_vocab\":%d,\"tokens\":\"%s\",\"threadpool\":%s}\n",
               args.n_ctx, args.ubatch, args.threads, (int) cp.n_threads_batch, args.flash_attn.c_str(), n_vocab,
               args.tokens.empty() ? "seeded filler" : "given", args.threadpool ? "true" : "false");
        fflush(stdout);
        Driver d(ctx, std::move(tokens), args);
        std::string line;
        while (std::getline(std::cin, line) && serve_one(d, args, line)) {
            printf("{\"kind\":\"done\"}\n");
            fflush(stdout);
        }
    }
    llama_free(ctx);
    if (tp) {
        tp_free(tp);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
