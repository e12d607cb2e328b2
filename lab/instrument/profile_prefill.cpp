// prefill-lab per-node prefill profiler, linked against the engine's libllama; no llama.cpp edit.
//
// Cumulative depth sweep: the context is decoded in fixed chunks, chunk c covering positions
// [c*chunk, (c+1)*chunk), so chunk c is a probe at depth c*chunk. Each cycle runs two passes over the same
// depths from an empty memory, FUSED first in even cycles and TIMED first in odd ones:
//   FUSED  cb_eval never observes: the scheduler fuses nodes at native speed; the clock wraps llama_decode.
//   TIMED  cb_eval asks for every node: each node is computed alone and synchronised; the clock wraps it.
// Output: JSON lines on --out, one per (pass row):
//   {"kind":"meta", ...}
//   {"kind":"fused","cycle":k,"depth":d,"ms":x}
//   {"kind":"timed","cycle":k,"depth":d,"ms":x}                       (llama_decode wall in TIMED mode)
//   {"kind":"node","cycle":k,"depth":d,"name":..,"op":..,"src0":..,"ne":[..],"ms":x,"calls":n}
// and a line `progress cycle=k pass=fused|timed depth=d ms=x` on stderr per chunk. The model, the context, the
// threadpool (--threadpool: lab/native/labtool.h's Engine), the filler and the options -t, -tb, --n-ctx, --seed,
// --flash-attn are those of the in-process arms driver (lab/inproc/driver.cpp). Bad input exits 2 with one line.
#include "labtool.h"

#include <cinttypes>
#include <cstdio>
#include <map>
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

struct Args {
    labtool::CommonArgs common;  // n_ctx 0: max_depth + chunk
    std::string out;
    int chunk = 512;
    int max_depth = 4096;
    int cycles = 3;
    int first_cycle = 0;  // resume: cycles [first_cycle, cycles) are run
    int warmup = 1;
};

Args parse(int argc, char ** argv) {
    Args a;
    labtool::ArgReader r(argc, argv,
                         "usage: lab-profile-prefill --model M --out F [--chunk 512] [--max-depth 4096] [--cycles 3]"
                         " [-t 2] [-tb N] [--n-ctx N] [--seed 1] [--flash-attn auto|on|off] [-ctk f16] [-ctv f16]"
                         " [--warmup 1] [--threadpool] [--first-cycle K (resume: run cycles K..cycles-1)]");
    while (r.next()) {
        const std::string & k = r.key();
        if (r.common(a.common)) {
            continue;
        } else if (k == "--out" || k == "-o") {
            a.out = r.value();
        } else if (k == "--chunk") {
            a.chunk = r.int_value(1);
        } else if (k == "--max-depth") {
            a.max_depth = r.int_value(0);
        } else if (k == "--cycles") {
            a.cycles = r.int_value(1);
        } else if (k == "--warmup") {
            a.warmup = r.int_value(0);
        } else if (k == "--first-cycle") {
            a.first_cycle = r.int_value(0);
        } else {
            r.unknown();
        }
    }
    r.finish(a.common);
    if (a.out.empty()) {
        r.usage();
    }
    if (a.first_cycle >= a.cycles) {
        fail("--first-cycle " + std::to_string(a.first_cycle) + " leaves none of " + std::to_string(a.cycles) +
             " cycles to run");
    }
    if (a.common.n_ctx == 0) {
        a.common.n_ctx = a.max_depth + a.chunk;
    }
    return a;
}

// One profile: the engine (its context evaluates through cb_eval), the filler stream of every depth, the dump.
class Profiler {
  public:
    explicit Profiler(const Args & args) :
        args_(args),
        engine_(args.common, args.common.n_ctx, args.chunk, cb_eval, &cbd_),
        n_chunks_(args.max_depth / args.chunk + 1),
        tokens_(labtool::filler_tokens(n_chunks_ * args.chunk, args.common.seed, engine_.n_vocab())),
        batch_(args.chunk),
        out_(fopen(args.out.c_str(), "w")) {
        if (!out_) {
            fail("cannot write " + args.out);
        }
    }

    ~Profiler() { fclose(out_); }

    Profiler(const Profiler &) = delete;
    Profiler & operator=(const Profiler &) = delete;

    void write_meta() {
        fprintf(out_,
                "{\"kind\":\"meta\",\"n_vocab\":%d,\"n_layer\":%d,\"chunk\":%d,\"max_depth\":%d,\"cycles\":%d,"
                "\"threads\":%d,\"threads_batch\":%d,\"threadpool\":%s,\"n_ctx\":%d,\"flash_attn\":%s,"
                "\"cache_type_k\":%s,\"cache_type_v\":%s,\"system_info\":%s}\n",
                engine_.n_vocab(), llama_model_n_layer(engine_.model), args_.chunk, (n_chunks_ - 1) * args_.chunk,
                args_.cycles, args_.common.threads, args_.common.threads_batch,
                engine_.has_threadpool() ? "true" : "false", args_.common.n_ctx,
                json_str(args_.common.flash_attn).c_str(), json_str(args_.common.cache_type_k).c_str(),
                json_str(args_.common.cache_type_v).c_str(), json_str(llama_print_system_info()).c_str());
    }

    // untimed chunks at depth 0, so one-time costs (weight repacking, first allocations) stay out of depth 0
    void warm_up() {
        for (int w = 0; w < args_.warmup; ++w) {
            if (decode_chunk(0) != 0) {
                fail("warm-up decode failed");
            }
            llama_memory_clear(engine_.memory(), true);
        }
    }

    // one pass over every depth from an empty memory: its wall per chunk, and (timed) the chunk's nodes
    void run_pass(int cycle, bool timed) {
        const char * pass = timed ? "timed" : "fused";
        llama_memory_clear(engine_.memory(), true);
        for (int c = 0; c < n_chunks_; ++c) {
            const int depth = c * args_.chunk;
            cbd_.timed = timed;
            cbd_.acc.clear();
            const double t0 = now_ms();
            const int rc = decode_chunk(c);
            const double ms = now_ms() - t0;
            cbd_.timed = false;
            if (rc != 0) {
                fail("llama_decode failed (" + std::to_string(rc) + ") at depth " + std::to_string(depth));
            }
            fprintf(out_, "{\"kind\":%s,\"cycle\":%d,\"depth\":%d,\"ms\":%.6f}\n", json_str(pass).c_str(), cycle, depth,
                    ms);
            for (const auto & [key, a] : cbd_.acc) {
                fprintf(out_,
                        "{\"kind\":\"node\",\"cycle\":%d,\"depth\":%d,\"name\":%s,\"op\":%s,\"src0\":%s,"
                        "\"ne\":[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "],\"ms\":%.6f,\"calls\":%d}\n",
                        cycle, depth, json_str(key.first).c_str(), json_str(a.op).c_str(), json_str(a.src0).c_str(),
                        a.ne[0], a.ne[1], a.ne[2], a.ne[3], a.ms, a.calls);
            }
            fflush(out_);
            fprintf(stderr, "progress cycle=%d pass=%s depth=%d ms=%.3f\n", cycle, pass, depth, ms);
        }
    }

  private:
    // chunk c of the filler: positions [c*chunk, (c+1)*chunk), logits for the last token only
    int decode_chunk(int c) {
        labtool::fill_batch(batch_.b, tokens_, c * args_.chunk, args_.chunk, true);
        return llama_decode(engine_.ctx, batch_.b);
    }

    const Args & args_;
    CbData cbd_;
    labtool::Engine engine_;
    const int n_chunks_;
    const std::vector<llama_token> tokens_;
    labtool::Batch batch_;
    FILE * out_;
};

}  // namespace

int main(int argc, char ** argv) {
    const Args args = parse(argc, argv);
    Profiler profiler(args);
    profiler.write_meta();
    profiler.warm_up();
    for (int cycle = args.first_cycle; cycle < args.cycles; ++cycle) {
        // the order alternates (even cycles FUSED first, odd TIMED first): whatever the first pass after another
        // pays (the caches the other left, pages first touched) falls on each pass alike over the cycles
        const bool timed_first = cycle % 2 == 1;
        profiler.run_pass(cycle, timed_first);
        profiler.run_pass(cycle, !timed_first);
    }
    return 0;
}
