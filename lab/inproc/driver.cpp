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
//    "copy_ms":..,"blob_bytes":..,"pos_min":..,"pos_max":..}
//   save DIR        write the depth-L states of the last fill, one file per grid L (DIR/L<L>.state), so another
//                   process of the same driver (same model and options) can measure without a fill of its own:
//                   {"kind":"saved","L":..,"bytes":..,"ms":..}
//   load DIR        read those files back as this process's depth-L states (a read, not a prefill):
//                   {"kind":"loaded","L":..,"bytes":..,"ms":..}; a missing or short file is an error
//   quit            (or end of input)
// Every arm starts from llama_memory_seq_rm of the whole sequence. After fake, genuine and plain the sequence's
// max position must be L-1 (the hybrid reports the lower of its two children), else the sample fails with the
// reason. Threads, batch and flash attention are the server's (-t, -tb, --ubatch, --flash-attn); like
// llama-server, no threadpool is attached unless --threadpool asks for one as llama-bench does. Tokens come from
// --tokens FILE (whitespace-separated ids), else a seeded filler. The first line on stdout is {"kind":"meta",...}.
// The model, the context, the threadpool, the filler and the shared options are the profiler's too
// (lab/native/labtool.h).
// Bad startup input (L + new beyond the context, a memory type without the fake op, bad token ids) exits 2 with
// one line on stderr; --check stops after those checks. A bad command answers {"kind":"error","reason":..}.
#include "labtool.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using labtool::fail;
using labtool::json_str;
using labtool::now_ms;

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
    labtool::CommonArgs common;  // n_ctx 0: the grid's largest L + new
    std::string tokens;
    std::vector<int> Ls{512};
    std::vector<int> news{64};
    int ubatch = 512;
    bool check = false;
    bool fake = true;  // --no-fake: the memory type need not support the fake op
};

Args parse(int argc, char ** argv) {
    Args a;
    labtool::ArgReader r(
        argc, argv,
        "usage: lab-inproc-driver --model M [--Ls 512,2048] [--news 64] [--tokens FILE] [--check] < commands");
    while (r.next()) {
        const std::string & k = r.key();
        if (r.common(a.common)) {
            continue;
        } else if (k == "--Ls") {
            a.Ls = ints(r.value());
        } else if (k == "--news") {
            a.news = ints(r.value());
        } else if (k == "--ubatch") {
            a.ubatch = r.int_value(1);
        } else if (k == "--tokens") {
            a.tokens = r.value();
        } else if (k == "--check") {
            a.check = true;
        } else if (k == "--no-fake") {
            a.fake = false;
        } else {
            r.unknown();
        }
    }
    r.finish(a.common);
    int need = 0;
    for (int L : a.Ls) {
        for (int n : a.news) {
            if (L < 1 || n < 1) {
                fail("L and new must be positive");
            }
            need = std::max(need, L + n);
        }
    }
    if (a.common.n_ctx == 0) {
        a.common.n_ctx = need;
    }
    if (need > a.common.n_ctx) {
        fail("L + new = " + std::to_string(need) + " does not fit the context (" + std::to_string(a.common.n_ctx) +
             ")");
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

struct Sample {
    bool ok = true;
    std::string reason;
    double decode_ms = 0.0;
    double prep_ms = 0.0;
    double copy_ms = 0.0;
    size_t blob_bytes = 0;
    int pos_min = -1;  // a sliding-window cache holds only the window's positions: its first one shows which
    int pos_max = -1;
};

class Driver {
  public:
    Driver(labtool::Engine & engine, std::vector<llama_token> tokens, const Args & args) :
        ctx_(engine.ctx),
        mem_(engine.memory()),
        tokens_(std::move(tokens)),
        args_(args),
        batch_(args.ubatch) {}

    // the arms by name, each with how it brings the sequence to where its timed decode starts
    static bool known_arm(const std::string & arm) { return arms().count(arm) == 1; }

    static std::string arm_names() {
        std::string out;
        for (const auto & [name, prep] : arms()) {
            out += (out.empty() ? "" : ", ") + name;
        }
        return out;
    }

    void fill(int pass) {
        llama_memory_seq_rm(mem_, 0, -1, -1);
        int pos = 0;
        for (const int L : args_.Ls) {
            const double t0 = now_ms();
            if (!decode(pos, L)) {
                return error("decoding the stream from " + std::to_string(pos) + " to " + std::to_string(L) +
                             " failed");
            }
            const double ms = now_ms() - t0;
            const double t1 = now_ms();
            if (!capture(L)) {
                return error("llama_state_seq_get_data_ext returned 0 at L=" + std::to_string(L));
            }
            const double capture_ms = now_ms() - t1;
            printf("{\"kind\":\"fill\",\"pass\":%d,\"L\":%d,\"from\":%d,\"ms\":%.4f,\"capture_ms\":%.4f,"
                   "\"blob_bytes\":%zu}\n",
                   pass, L, pos, ms, capture_ms, blobs_[L].size());
            for (const int n_new : args_.news) {
                Sample s;
                restore(L, s);
                time_new(L, L + n_new, s);
                printf("{\"kind\":\"chunk\",\"pass\":%d,\"L\":%d,\"new\":%d,\"ok\":%s,\"reason\":%s,\"ms\":%.4f}\n",
                       pass, L, n_new, s.ok ? "true" : "false", json_str(s.reason).c_str(), s.decode_ms);
            }
            Sample back;  // continue the stream from depth L
            restore(L, back);
            if (!back.ok) {
                return error(back.reason);
            }
            pos = L;
        }
    }

    void rep(int L, int n_new, int rep, const std::vector<std::string> & names) {
        for (const auto & arm : names) {
            llama_memory_seq_rm(mem_, 0, -1, -1);
            Sample s;
            const int from = (this->*arms().at(arm))(L, s);
            s.pos_min = (int) llama_memory_seq_pos_min(mem_, 0);
            s.pos_max = (int) llama_memory_seq_pos_max(mem_, 0);
            if (s.ok && from == L && s.pos_max != L - 1) {
                s.ok = false;
                s.reason = "the sequence's max position is " + std::to_string(s.pos_max) + ", not L-1";
            }
            time_new(from, L + n_new, s);
            if (s.ok && arm == "genuine") {
                yardstick(L, s);
            }
            printf("{\"kind\":\"sample\",\"L\":%d,\"new\":%d,\"arm\":%s,\"rep\":%d,\"ok\":%s,\"reason\":%s,"
                   "\"decode_ms\":%.4f,\"prep_ms\":%.4f,\"copy_ms\":%.4f,\"blob_bytes\":%zu,\"pos_min\":%d,"
                   "\"pos_max\":%d}\n",
                   L, n_new, json_str(arm).c_str(), rep, s.ok ? "true" : "false", json_str(s.reason).c_str(),
                   s.decode_ms, s.prep_ms, s.copy_ms, s.blob_bytes, s.pos_min, s.pos_max);
        }
    }

    void save(const std::string & dir) {
        for (const int L : args_.Ls) {
            const auto it = blobs_.find(L);
            if (it == blobs_.end()) {
                return error("no depth-" + std::to_string(L) + " state to save: send a fill first");
            }
            const double t0 = now_ms();
            std::ofstream out(state_file(dir, L), std::ios::binary | std::ios::trunc);
            out.write(reinterpret_cast<const char *>(it->second.data()), (std::streamsize) it->second.size());
            out.close();
            if (!out) {
                return error("cannot write " + state_file(dir, L));
            }
            printf("{\"kind\":\"saved\",\"L\":%d,\"bytes\":%zu,\"ms\":%.4f}\n", L, it->second.size(), now_ms() - t0);
        }
    }

    void load(const std::string & dir) {
        for (const int L : args_.Ls) {
            const double t0 = now_ms();
            std::ifstream in(state_file(dir, L), std::ios::binary | std::ios::ate);
            if (!in) {
                return error("cannot read " + state_file(dir, L) + ": save the states of a fill first");
            }
            std::vector<uint8_t> blob((size_t) in.tellg());
            in.seekg(0);
            in.read(reinterpret_cast<char *>(blob.data()), (std::streamsize) blob.size());
            if (!in || blob.empty()) {
                return error("short read of " + state_file(dir, L));
            }
            blobs_[L] = std::move(blob);
            printf("{\"kind\":\"loaded\",\"L\":%d,\"bytes\":%zu,\"ms\":%.4f}\n", L, blobs_[L].size(), now_ms() - t0);
        }
    }

    void error(const std::string & why) { printf("{\"kind\":\"error\",\"reason\":%s}\n", json_str(why).c_str()); }

  private:
    static std::string state_file(const std::string & dir, int L) { return dir + "/L" + std::to_string(L) + ".state"; }

    using Prep = int (Driver::*)(int L, Sample & s);  // the position the timed decode starts from

    static const std::map<std::string, Prep> & arms() {
        static const std::map<std::string, Prep> table = {
            {"baseline", &Driver::prep_baseline}, {"fake", &Driver::prep_fake},     {"genuine", &Driver::prep_genuine},
            {"plain", &Driver::prep_plain},       {"warmup", &Driver::prep_warmup},
        };
        return table;
    }

    // baseline: L + new decoded from an empty sequence, timed whole
    int prep_baseline(int, Sample &) { return 0; }

    // fake: llama_memory_seq_fake_prefix(L) (prep_ms)
    int prep_fake(int L, Sample & s) {
        const double t0 = now_ms();
        s.ok = llama_memory_seq_fake_prefix(mem_, 0, (uint32_t) L);
        s.prep_ms = now_ms() - t0;
        s.reason = s.ok ? "" : "llama_memory_seq_fake_prefix refused (no room?)";
        return L;
    }

    // genuine: the depth-L state of the last fill restored (prep_ms: the cache read); rep adds the yardstick
    int prep_genuine(int L, Sample & s) {
        restore(L, s);
        return L;
    }

    // plain: L decoded (untimed): the genuine hit without a saved state
    int prep_plain(int L, Sample & s) {
        s.ok = decode(0, L);
        s.reason = s.ok ? "" : "decoding the genuine prefix failed";
        return L;
    }

    // warmup: as genuine, then the same chunk: wakes this process's threads, caches and buffers
    int prep_warmup(int L, Sample & s) { return prep_genuine(L, s); }

    // tokens[from, to) timed, unless the preparation failed
    void time_new(int from, int to, Sample & s) {
        if (!s.ok) {
            return;
        }
        const double t0 = now_ms();
        s.ok = decode(from, to);
        s.decode_ms = now_ms() - t0;
        s.reason = s.ok ? "" : "llama_decode failed";
    }

    // decode tokens[p0, p1) at their own positions, in ubatch-sized batches; false on a decode error
    bool decode(int p0, int p1) {
        for (int start = p0; start < p1; start += args_.ubatch) {
            const int n = std::min(args_.ubatch, p1 - start);
            labtool::fill_batch(batch_.b, tokens_, start, n, start + n == p1);
            if (llama_decode(ctx_, batch_.b) != 0) {
                return false;
            }
        }
        return true;
    }

    // the really decoded depth-L state as a blob (flags 0: attention KV and recurrent state); false on failure
    bool capture(int L) {
        std::vector<uint8_t> & blob = blobs_[L];
        blob.resize(llama_state_seq_get_size_ext(ctx_, 0, LLAMA_STATE_SEQ_FLAGS_NONE));
        if (llama_state_seq_get_data_ext(ctx_, blob.data(), blob.size(), 0, LLAMA_STATE_SEQ_FLAGS_NONE) == 0) {
            blobs_.erase(L);
            return false;
        }
        return true;
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
    labtool::Batch batch_;
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
        if (!in_grid(args.Ls, L) || !in_grid(args.news, n_new)) {
            d.error("(" + words[1] + ", " + words[2] + ") is not a point of this driver's grid");
        } else if (arms.empty() || !std::all_of(arms.begin(), arms.end(), Driver::known_arm)) {
            d.error("unknown arm in " + words[4] + " (" + Driver::arm_names() + ")");
        } else if (!args.fake && std::find(arms.begin(), arms.end(), "fake") != arms.end()) {
            d.error("started with --no-fake: no fake arm");
        } else {
            d.rep(L, n_new, std::atoi(words[3].c_str()), arms);
        }
    } else if ((words[0] == "save" || words[0] == "load") && words.size() >= 2) {
        const std::string dir = line.substr(line.find(' ') + 1);  // the rest of the line: a path may hold spaces
        if (words[0] == "save") {
            d.save(dir);
        } else {
            d.load(dir);
        }
    } else {
        d.error("unknown command: " + line.substr(0, 80) + " (fill P | rep L N R ARMS | save DIR | load DIR | quit)");
    }
    return true;
}

void write_meta(const Args & args, const labtool::Engine & engine) {
    printf("{\"kind\":\"meta\",\"n_ctx\":%d,\"ubatch\":%d,\"threads\":%d,\"threads_batch\":%d,\"flash_attn\":%s,"
           "\"n_vocab\":%d,\"tokens\":%s,\"threadpool\":%s,\"cache_type_k\":%s,\"cache_type_v\":%s}\n",
           args.common.n_ctx, args.ubatch, args.common.threads, args.common.threads_batch,
           json_str(args.common.flash_attn).c_str(), engine.n_vocab(),
           json_str(args.tokens.empty() ? "seeded filler" : "given").c_str(),
           engine.has_threadpool() ? "true" : "false", json_str(args.common.cache_type_k).c_str(),
           json_str(args.common.cache_type_v).c_str());
    fflush(stdout);
}

}  // namespace

int main(int argc, char ** argv) {
    const Args args = parse(argc, argv);
    labtool::Engine engine(args.common, args.common.n_ctx, args.ubatch);
    if (args.fake && !llama_memory_seq_fake_prefix(engine.memory(), 0, 0)) {
        fail("this model's memory type has no fake-prefix op (an iSWA cache?): drop the fake arm");
    }
    const int need = args.Ls.back() + args.news.back();
    std::vector<llama_token> tokens = args.tokens.empty()
                                          ? labtool::filler_tokens(need, args.common.seed, engine.n_vocab())
                                          : read_tokens(args.tokens, need, engine.n_vocab());
    if (args.check) {
        return 0;  // the inputs, the model, the context and the arms are fine; measure nothing
    }
    write_meta(args, engine);
    Driver driver(engine, std::move(tokens), args);
    std::string line;
    while (std::getline(std::cin, line) && serve_one(driver, args, line)) {
        printf("{\"kind\":\"done\"}\n");
        fflush(stdout);
    }
    return 0;
}
