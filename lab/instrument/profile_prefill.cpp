// prefill-lab per-node prefill profiler, linked against the engine's libllama plus the lab's
// llama_memory_seq_fake_prefix (the engine patch); nothing else in llama.cpp is edited.
//
// One process of a profile. Every probe is one chunk of --chunk filler tokens at a depth L of --depths, timed in
// two modes:
//   FUSED  cb_eval never observes: the scheduler fuses nodes at native speed; the clock wraps llama_decode.
//   TIMED  cb_eval asks for every node: each node is computed alone and synchronised; the clock wraps it.
// How a probe reaches its depth (--fill):
//   fake   llama_memory_seq_fake_prefix(L) before every chunk: the chunk attends over L cells it never computed
//          (the lab's claim, checked below: a chunk at depth L costs what it costs after L real tokens), so a
//          probe costs one chunk whatever L. --reps rounds, each visiting every depth once in an order of its own
//          (random, seeded by --seed, --process and the round), FUSED and TIMED back to back at each, which first
//          alternating: a depth's reps spread over the whole process, so the host's drift reaches every depth.
//   real   the cumulative pass: the context decoded from empty in chunks, FUSED and TIMED passes alternating
//          first; a pass is one rep at every depth (depths are multiples of the chunk). A probe at L costs L.
// --check-depth D (fill fake): then the fake-vs-real check, in depth order up to D: one real fill, and at each
// depth d <= D its state saved, and --reps reps of four chunks, each mode after a restored real state and after a
// fake prefix (the order alternating by rep), then the state restored and the fill continued.
// Output: JSON lines on --out:
//   {"kind":"meta", ...}
//   {"kind":"fused"|"timed","process":k,"fill":"fake"|"real","check":b,"depth":d,"rep":r,"visit":v,"ms":x}
//                                          (visit: the depth's place in its round's order, or in the pass)
//   {"kind":"node","process":k,"fill":..,"check":b,"depth":d,"rep":r,"name":..,"op":..,"src0":..,"ne":[..],
//    "ms":x,"calls":n}                                              (the TIMED chunk's nodes, after its wall row)
// and a line `progress depth=d mode=fused|timed fill=.. ms=x` on stderr per chunk.
// --layout: no timing; what the kernels of one chunk will see at each depth, after a live fill, after that fill's
// state restored and after a fake prefix (lab/native/kvlayout.h), each read exactly:
//   {"kind":"cells","process":k,"fill":"live"|"restored"|"fake","depth":d,"dump":text}   (llama.cpp's dump of
//    each KV cache just before the chunk is placed: cells, positions, head; read by lab.engine.cells)
//   {"kind":"graph",...,"layer":il,"nodes":n,"shapes":digest,"params":digest}        (every layer's nodes)
//   {"kind":"attn",...,"layer":il,"op":..,"n_kv":..,"rows":..,"unmasked":[[count,row,step,len],..],"tiles":..,
//    "mask":digest,"params":digest,"k_writes":[[cell,len],..]}   (each attention node's mask, its layer's K writes)
// The model, the context, the threadpool (--threadpool: lab/native/labtool.h's Engine), the filler and the options
// -t, -tb, --n-ctx, --seed, --flash-attn are those of the in-process arms driver (lab/inproc/driver.cpp). Bad input
// exits 2 with one line.
#include "kvlayout.h"
#include "labtool.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using labtool::fail;
using labtool::json_str;
using labtool::now_ms;

struct NodeAcc {
    std::string op;
    std::string src0;
    int64_t ne[4] = {0, 0, 0, 0};
    double ms = 0.0;
    int calls = 0;
};

struct CbData {
    bool timed = false;
    labtool::LayoutCapture * layout = nullptr;  // --layout: observe every node, time none
    double t_ask = 0.0;
    std::map<std::pair<std::string, std::string>, NodeAcc> acc;  // per chunk, keyed by (node name, op)
};

bool cb_eval(ggml_tensor * t, bool ask, void * user) {
    auto * d = static_cast<CbData *>(user);
    if (d->layout) {
        return d->layout->observe(t, ask);
    }
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

struct Args {
    labtool::CommonArgs common;  // n_ctx 0: the deepest depth + chunk
    std::string out;
    int chunk = 512;
    std::vector<int> depths;
    std::string fill = "fake";
    int reps = 1;
    int process = 0;
    int check_depth = -1;  // -1: no fake-vs-real check
    int warmup = 1;
    bool layout = false;  // --layout: the structural comparison, no timing
};

// "0,512,1024": distinct whole numbers >= 0, or exit 2 naming the bad one
std::vector<int> parse_depths(const std::string & text) {
    std::vector<int> out;
    std::set<int> seen;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char * end = nullptr;
        errno = 0;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
            fail("--depths takes whole numbers >= 0 separated by commas, not '" + item + "'");
        }
        if (!seen.insert((int) v).second) {
            fail("--depths lists depth " + item + " twice");
        }
        out.push_back((int) v);
    }
    if (out.empty()) {
        fail("--depths lists no depth");
    }
    std::sort(out.begin(), out.end());
    return out;
}

Args parse(int argc, char ** argv) {
    Args a;
    labtool::ArgReader r(argc, argv,
                         "usage: lab-profile-prefill --model M --out F --depths D1,D2,.. [--fill fake|real] [--reps 1]"
                         " [--process K] [--check-depth D] [--chunk 512] [-t 2] [-tb N] [--n-ctx N] [--seed 1]"
                         " [--flash-attn auto|on|off] [-ctk f16] [-ctv f16] [--warmup 1] [--threadpool] [--layout]");
    while (r.next()) {
        const std::string & k = r.key();
        if (r.common(a.common)) {
            continue;
        } else if (k == "--out" || k == "-o") {
            a.out = r.value();
        } else if (k == "--chunk") {
            a.chunk = r.int_value(1);
        } else if (k == "--depths") {
            a.depths = parse_depths(r.value());
        } else if (k == "--fill") {
            a.fill = r.value();
        } else if (k == "--reps") {
            a.reps = r.int_value(1);
        } else if (k == "--process") {
            a.process = r.int_value(0);
        } else if (k == "--check-depth") {
            a.check_depth = r.int_value(0);
        } else if (k == "--warmup") {
            a.warmup = r.int_value(0);
        } else if (k == "--layout") {
            a.layout = true;
        } else {
            r.unknown();
        }
    }
    r.finish(a.common);
    if (a.out.empty() || a.depths.empty()) {
        r.usage();
    }
    if (a.fill != "fake" && a.fill != "real") {
        fail("--fill is fake or real, not " + a.fill);
    }
    if (a.fill == "real") {
        for (const int d : a.depths) {
            if (d % a.chunk != 0) {
                fail("--fill real reaches depths at multiples of --chunk " + std::to_string(a.chunk) + ", not " +
                     std::to_string(d));
            }
        }
        if (a.check_depth >= 0) {
            fail("--check-depth goes with --fill fake (a real fill is what it checks against)");
        }
    }
    if (a.layout && (a.fill != "fake" || a.check_depth >= 0)) {
        fail("--layout is a pass of its own: no --fill real, no --check-depth");
    }
    if (a.layout && a.depths.back() + a.chunk > 99999) {
        fail("--layout reads llama.cpp's cell dump, five characters a position: depth + chunk up to 99999");
    }
    if (a.check_depth >= 0 && a.depths.front() > a.check_depth) {
        fail("--check-depth " + std::to_string(a.check_depth) + " is below every depth");
    }
    const int need = a.depths.back() + a.chunk;
    if (a.common.n_ctx == 0) {
        a.common.n_ctx = need;
    } else if (a.common.n_ctx < need) {
        fail("depth " + std::to_string(a.depths.back()) + " and a chunk of " + std::to_string(a.chunk) +
             " need a context of " + std::to_string(need) + ", not --n-ctx " + std::to_string(a.common.n_ctx));
    }
    return a;
}

// One process of a profile: the engine (its context evaluates through cb_eval), the filler, the dump.
class Profiler {
  public:
    explicit Profiler(const Args & args) :
        args_(args),
        engine_(args.common, args.common.n_ctx, args.chunk, cb_eval, &cbd_),
        tokens_(labtool::filler_tokens(args.depths.back() + args.chunk, args.common.seed, engine_.n_vocab())),
        batch_(args.chunk) {
        const int n_ctx_train = llama_model_n_ctx_train(engine_.model);
        if (args.depths.back() + args.chunk > n_ctx_train) {
            fail("depth " + std::to_string(args.depths.back()) + " and a chunk of " + std::to_string(args.chunk) +
                 " pass the model's context of " + std::to_string(n_ctx_train) + " tokens");
        }
        if (args.fill == "fake" && !llama_memory_seq_fake_prefix(engine_.memory(), 0, 0)) {
            fail("this engine's memory refuses a fake prefix");
        }
        if (args.layout) {
            cbd_.layout = &layout_;
            llama_log_set(labtool::CellsCapture::log, &cells_);
        }
        out_ = fopen(args.out.c_str(), "w");  // after every check: bad input writes nothing
        if (!out_) {
            fail("cannot write " + args.out);
        }
    }

    ~Profiler() { fclose(out_); }

    Profiler(const Profiler &) = delete;
    Profiler & operator=(const Profiler &) = delete;

    void write_meta() {
        fprintf(out_,
                "{\"kind\":\"meta\",\"n_vocab\":%d,\"n_layer\":%d,\"n_ctx_train\":%d,\"chunk\":%d,\"fill\":%s,"
                "\"reps\":%d,\"process\":%d,\"check_depth\":%d,\"threads\":%d,\"threads_batch\":%d,"
                "\"threadpool\":%s,\"n_ctx\":%d,\"flash_attn\":%s,\"cache_type_k\":%s,\"cache_type_v\":%s,"
                "\"system_info\":%s}\n",
                engine_.n_vocab(), llama_model_n_layer(engine_.model), llama_model_n_ctx_train(engine_.model),
                args_.chunk, json_str(args_.fill).c_str(), args_.reps, args_.process, args_.check_depth,
                args_.common.threads, args_.common.threads_batch, engine_.has_threadpool() ? "true" : "false",
                args_.common.n_ctx, json_str(args_.common.flash_attn).c_str(),
                json_str(args_.common.cache_type_k).c_str(), json_str(args_.common.cache_type_v).c_str(),
                json_str(llama_print_system_info()).c_str());
        fflush(out_);
    }

    // untimed chunks at depth 0, so one-time costs (weight repacking, first allocations) stay out of the probes
    void warm_up() {
        for (int w = 0; w < args_.warmup; ++w) {
            llama_memory_clear(engine_.memory(), true);
            if (decode_at(0) != 0) {
                fail("warm-up decode failed");
            }
        }
        llama_memory_clear(engine_.memory(), true);
    }

    // round `rep`'s order of the depths (random, seeded: a rerun of the process visits them alike)
    std::vector<int> order(int rep) const {
        std::vector<int> out = args_.depths;
        std::mt19937_64 rng(args_.common.seed * 1000003ULL + (uint64_t) args_.process * 1009ULL + (uint64_t) rep);
        std::shuffle(out.begin(), out.end(), rng);
        return out;
    }

    // fill fake: --reps rounds over the depths, FUSED and TIMED back to back after a fake prefix each
    void fake_probes() {
        for (int rep = 0; rep < args_.reps; ++rep) {
            const std::vector<int> depths = order(rep);
            for (size_t v = 0; v < depths.size(); ++v) {
                const bool timed_first = (rep + args_.process + (int) v) % 2 == 1;
                for (const bool timed : {timed_first, !timed_first}) {
                    fake_prefix(depths[v]);
                    probe(depths[v], rep, (int) v, timed, "fake", false);
                }
            }
        }
    }

    // fill real: the cumulative passes, one per rep, FUSED and TIMED passes alternating first
    void real_passes() {
        const std::set<int> at(args_.depths.begin(), args_.depths.end());
        for (int rep = 0; rep < args_.reps; ++rep) {
            const bool timed_first = (rep + args_.process) % 2 == 1;
            for (const bool timed : {timed_first, !timed_first}) {
                llama_memory_clear(engine_.memory(), true);
                int visit = 0;
                for (int depth = 0; depth <= args_.depths.back(); depth += args_.chunk) {
                    if (at.count(depth)) {
                        probe(depth, rep, visit++, timed, "real", false);
                    } else if (decode_at(depth) != 0) {
                        fail("llama_decode failed at depth " + std::to_string(depth));
                    }
                }
            }
        }
    }

    // the fake-vs-real check: depths up to --check-depth in order, one real fill continued between them
    void check() {
        llama_memory_clear(engine_.memory(), true);
        int filled = 0;  // the real fill's depth
        std::vector<uint8_t> state;
        int visit = 0;
        for (const int depth : args_.depths) {
            if (depth > args_.check_depth) {
                break;
            }
            for (; filled < depth; filled = std::min(depth, filled + args_.chunk)) {
                if (decode_span(filled, std::min(args_.chunk, depth - filled)) != 0) {
                    fail("llama_decode failed filling to depth " + std::to_string(depth));
                }
            }
            save(state, depth);
            for (int rep = 0; rep < args_.reps; ++rep) {
                const bool real_first = (rep + args_.process) % 2 == 0;
                for (const bool timed : {false, true}) {
                    for (const bool real : {real_first, !real_first}) {
                        if (real) {
                            restore(state, depth);
                        } else {
                            fake_prefix(depth);
                        }
                        probe(depth, rep, visit, timed, real ? "real" : "fake", true);
                    }
                }
            }
            ++visit;
            restore(state, depth);  // the fill goes on from the real state
        }
    }

    // --layout: at each depth in order, one chunk after the live fill, after its state restored, after a fake
    // prefix; each chunk's view of the memory and its graph printed, nothing timed
    void layout() {
        llama_memory_clear(engine_.memory(), true);
        int filled = 0;
        std::vector<uint8_t> state;
        for (const int depth : args_.depths) {
            for (; filled < depth; filled = std::min(depth, filled + args_.chunk)) {
                cbd_.layout = nullptr;
                const int rc = decode_span(filled, std::min(args_.chunk, depth - filled));
                cbd_.layout = &layout_;
                if (rc != 0) {
                    fail("llama_decode failed filling to depth " + std::to_string(depth));
                }
            }
            save(state, depth);
            layout_probe(depth, "live");
            restore(state, depth);
            layout_probe(depth, "restored");
            fake_prefix(depth);
            layout_probe(depth, "fake");
            restore(state, depth);  // the fill goes on from the real state
        }
    }

  private:
    void layout_probe(int depth, const char * fill) {
        layout_.clear();
        cells_.clear();
        cells_.on = true;
        const int rc = decode_at(depth);
        cells_.on = false;
        if (rc != 0) {
            fail("llama_decode failed (" + std::to_string(rc) + ") at depth " + std::to_string(depth));
        }
        const std::string where = "\"process\":" + std::to_string(args_.process) + ",\"fill\":" + json_str(fill) +
                                  ",\"depth\":" + std::to_string(depth);
        cells_.print(out_, where);
        layout_.print(out_, where);
        fflush(out_);
        fprintf(stderr, "progress depth=%d mode=layout fill=%s\n", depth, fill);
    }

    void save(std::vector<uint8_t> & state, int depth) {
        state.resize(llama_state_seq_get_size(engine_.ctx, 0));
        if (llama_state_seq_get_data(engine_.ctx, state.data(), state.size(), 0) != state.size()) {
            fail("saving the state at depth " + std::to_string(depth) + " failed");
        }
    }

    // the sequence at a fake depth (depth 0: empty; the patch leaves a sequence as it is at 0)
    void fake_prefix(int depth) {
        if (depth == 0) {
            llama_memory_seq_rm(engine_.memory(), 0, -1, -1);
            return;
        }
        if (!llama_memory_seq_fake_prefix(engine_.memory(), 0, (uint32_t) depth)) {
            fail("llama_memory_seq_fake_prefix refused depth " + std::to_string(depth));
        }
    }

    void restore(const std::vector<uint8_t> & state, int depth) {
        llama_memory_seq_rm(engine_.memory(), 0, -1, -1);
        if (llama_state_seq_set_data(engine_.ctx, state.data(), state.size(), 0) != state.size()) {
            fail("restoring the state at depth " + std::to_string(depth) + " failed");
        }
    }

    // one timed chunk at `depth` (the memory already holds the depth): its wall row, and (TIMED) its nodes
    void probe(int depth, int rep, int visit, bool timed, const char * fill, bool checking) {
        const char * mode = timed ? "timed" : "fused";
        cbd_.timed = timed;
        cbd_.acc.clear();
        const double t0 = now_ms();
        const int rc = decode_at(depth);
        const double ms = now_ms() - t0;
        cbd_.timed = false;
        if (rc != 0) {
            fail("llama_decode failed (" + std::to_string(rc) + ") at depth " + std::to_string(depth));
        }
        const std::string where = "\"process\":" + std::to_string(args_.process) + ",\"fill\":" + json_str(fill) +
                                  ",\"check\":" + (checking ? "true" : "false") +
                                  ",\"depth\":" + std::to_string(depth) + ",\"rep\":" + std::to_string(rep);
        fprintf(out_, "{\"kind\":%s,%s,\"visit\":%d,\"ms\":%.6f}\n", json_str(mode).c_str(), where.c_str(), visit, ms);
        for (const auto & [key, a] : cbd_.acc) {
            fprintf(out_,
                    "{\"kind\":\"node\",%s,\"name\":%s,\"op\":%s,\"src0\":%s,"
                    "\"ne\":[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "],\"ms\":%.6f,\"calls\":%d}\n",
                    where.c_str(), json_str(key.first).c_str(), json_str(a.op).c_str(), json_str(a.src0).c_str(),
                    a.ne[0], a.ne[1], a.ne[2], a.ne[3], a.ms, a.calls);
        }
        fflush(out_);
        fprintf(stderr, "progress depth=%d mode=%s fill=%s ms=%.3f\n", depth, mode, fill, ms);
    }

    // the chunk at `depth`: filler positions [depth, depth + chunk), logits for the last token only
    int decode_at(int depth) { return decode_span(depth, args_.chunk); }

    int decode_span(int start, int n) {
        labtool::fill_batch(batch_.b, tokens_, start, n, true);
        return llama_decode(engine_.ctx, batch_.b);
    }

    const Args & args_;
    CbData cbd_;
    labtool::LayoutCapture layout_;
    labtool::CellsCapture cells_;
    labtool::Engine engine_;
    const std::vector<llama_token> tokens_;
    labtool::Batch batch_;
    FILE * out_ = nullptr;
};

}  // namespace

int main(int argc, char ** argv) {
    const Args args = parse(argc, argv);
    if (args.layout) {
        setenv("LLAMA_KV_CACHE_DEBUG", "3", 1);  // find_slot dumps every cache's cells (read back by CellsCapture)
    }
    Profiler profiler(args);
    profiler.write_meta();
    profiler.warm_up();
    if (args.layout) {
        profiler.layout();
    } else if (args.fill == "fake") {
        profiler.fake_probes();
        if (args.check_depth >= 0) {
            profiler.check();
        }
    } else {
        profiler.real_passes();
    }
    return 0;
}
