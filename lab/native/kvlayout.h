// prefill-lab: what the kernels of one decode will see, read exactly (no timing). Used by the profiler's
// --layout pass (lab/instrument/profile_prefill.cpp) to compare a chunk after a fake prefix with the same chunk
// after a real one.
//
//   LayoutCapture     a cb_eval observer: for every node of the graph its op and shapes (per layer), and for each
//                     attention node (FLASH_ATTN_EXT, or SOFT_MAX with a mask) the mask it reads: n_kv, the
//                     unmasked keys of every query row, the 64x64 tiles with any unmasked entry, a digest of the
//                     whole pattern; for each K-cache write (SET_ROWS into cache_k_l*) the cells it writes
//   CellsCapture      a log observer: llama.cpp's own dump of every KV cache's cells, positions and head just before
//                     the batch is placed (find_slot, LLAMA_KV_CACHE_DEBUG >= 3), as text
//
// Both print JSON lines. Runs compress what is regular: [count, row, step, length] of rows whose unmasked counts
// step alike, [cell, length] of written cells.
#pragma once

#include "labtool.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace labtool {

// FNV-1a, 64 bits: a digest to compare, not a secret
struct Fnv {
    uint64_t h = 1469598103934665603ULL;

    void add(const void * p, size_t n) {
        const auto * b = static_cast<const unsigned char *>(p);
        for (size_t i = 0; i < n; ++i) {
            h = (h ^ b[i]) * 1099511628211ULL;
        }
    }

    void add_i64(int64_t v) { add(&v, sizeof v); }

    std::string hex() const {
        char buf[17];
        snprintf(buf, sizeof buf, "%016" PRIx64, h);
        return buf;
    }
};

// the layer a node belongs to: the trailing "-N" of its name (llama.cpp's cb names), else -1
inline int layer_of(const ggml_tensor * t) {
    const char * dash = strrchr(t->name, '-');
    if (!dash || !dash[1]) {
        return -1;
    }
    char * end = nullptr;
    const long v = strtol(dash + 1, &end, 10);
    return (*end == '\0' && v >= 0) ? (int) v : -1;
}

inline const ggml_tensor * view_root(const ggml_tensor * t) {
    while (t->view_src) {
        t = t->view_src;
    }
    return t;
}

// the layer of the K cache a tensor views (cache_k_l<il>), else `otherwise`
inline int cache_layer(const ggml_tensor * t, int otherwise) {
    int il = -1;
    return sscanf(view_root(t)->name, "cache_k_l%d", &il) == 1 && il >= 0 ? il : otherwise;
}

// runs of values in arithmetic progression, as JSON: [[first value, first index, step, length], ...] (a causal
// mask's unmasked count per row is one run of step 1, a window's of step 0)
inline std::string progression_runs(const std::vector<int64_t> & v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size();) {
        const int64_t step = i + 1 < v.size() ? v[i + 1] - v[i] : 0;
        size_t j = i + 1;
        while (j < v.size() && v[j] - v[j - 1] == step) {
            ++j;
        }
        out += (out.size() > 1 ? "," : "") + std::string("[") + std::to_string(v[i]) + "," + std::to_string(i) + "," +
               std::to_string(step) + "," + std::to_string(j - i) + "]";
        i = j;
    }
    return out + "]";
}

// [[first, length], ...] of values that step by one
inline std::string step_runs(const std::vector<int64_t> & v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size();) {
        size_t j = i + 1;
        while (j < v.size() && v[j] == v[j - 1] + 1) {
            ++j;
        }
        out +=
            (out.size() > 1 ? "," : "") + std::string("[") + std::to_string(v[i]) + "," + std::to_string(j - i) + "]";
        i = j;
    }
    return out + "]";
}

class LayoutCapture {
  public:
    static constexpr int TILE = 64;  // ggml-cpu's flash-attention tile (GGML_FA_TILE_Q x GGML_FA_TILE_KV)

    struct Attn {
        std::string op;
        int64_t n_kv = 0;
        int64_t rows = 0;
        std::vector<int64_t> unmasked;  // per query row
        int64_t tiles = 0;
        std::string mask_digest;
        std::string params;  // the node's op parameters (e.g. a bound on the keys it reads, where the op has one)
    };

    struct Layer {
        Fnv shapes;  // every node's op and shapes, and its sources' shapes
        Fnv params;  // every node's op parameters and the integer inputs it reads (write cells, state copies)
        int nodes = 0;
        std::vector<Attn> attn;
        std::vector<int64_t> k_writes;  // the cells the chunk's keys are written to
    };

    void clear() { layers_.clear(); }

    // cb_eval: ask for every node; read it after it is computed (its inputs are set by then)
    bool observe(ggml_tensor * t, bool ask) {
        if (ask) {
            return true;
        }
        Layer & L = layers_[layer_of(t)];
        L.nodes += 1;
        add_shape(L.shapes, t);
        L.params.add(t->op_params, sizeof t->op_params);
        for (int i = 0; i < GGML_MAX_SRC && t->src[i]; ++i) {
            const ggml_tensor * s = t->src[i];
            add_shape(L.shapes, s);
            if ((s->type == GGML_TYPE_I32 || s->type == GGML_TYPE_I64) && (s->flags & GGML_TENSOR_FLAG_INPUT)) {
                L.params.add(s->data, ggml_nbytes(s));
            }
        }
        // an attention node's layer is its K cache's (cache_k_l<il>): not every release names the node by layer
        if (t->op == GGML_OP_FLASH_ATTN_EXT && t->src[3]) {
            layers_[cache_layer(t->src[1], layer_of(t))].attn.push_back(read_mask(t, t->src[0], t->src[3]));
        } else if (t->op == GGML_OP_SOFT_MAX && t->src[1]) {
            layers_[layer_of(t)].attn.push_back(read_mask(t, t->src[0], t->src[1]));
        } else if (const int il = cache_layer(t, -1); t->op == GGML_OP_SET_ROWS && il >= 0) {
            // a set_rows node is a view of the cache (named cache_k_l<il>): src[0] the rows, src[1] the cells
            const ggml_tensor * idx = t->src[1];
            for (int64_t i = 0; i < ggml_nelements(idx); ++i) {
                layers_[il].k_writes.push_back(idx->type == GGML_TYPE_I64 ? ((const int64_t *) idx->data)[i]
                                                                          : ((const int32_t *) idx->data)[i]);
            }
        }
        return true;
    }

    // one JSON line per layer; `where` is the row's shared fields
    void print(FILE * out, const std::string & where) const {
        for (const auto & [il, L] : layers_) {
            fprintf(out, "{\"kind\":\"graph\",%s,\"layer\":%d,\"nodes\":%d,\"shapes\":\"%s\",\"params\":\"%s\"}\n",
                    where.c_str(), il, L.nodes, L.shapes.hex().c_str(), L.params.hex().c_str());
            for (const Attn & a : L.attn) {
                fprintf(out,
                        "{\"kind\":\"attn\",%s,\"layer\":%d,\"op\":%s,\"n_kv\":%" PRId64 ",\"rows\":%" PRId64
                        ",\"unmasked\":%s,\"tiles\":%" PRId64 ",\"mask\":\"%s\",\"params\":\"%s\",\"k_writes\":%s}\n",
                        where.c_str(), il, json_str(a.op).c_str(), a.n_kv, a.rows, progression_runs(a.unmasked).c_str(),
                        a.tiles, a.mask_digest.c_str(), a.params.c_str(), step_runs(L.k_writes).c_str());
            }
        }
    }

  private:
    static void add_shape(Fnv & f, const ggml_tensor * t) {
        f.add_i64(t->op);
        f.add_i64(t->type);
        for (int i = 0; i < GGML_MAX_DIMS; ++i) {
            f.add_i64(t->ne[i]);
        }
    }

    // the mask a query row reads: -inf masks a key, anything else (0, or an ALiBi bias) lets it through
    static Attn read_mask(const ggml_tensor * node, const ggml_tensor * q, const ggml_tensor * mask) {
        Attn a;
        a.op = ggml_op_desc(node);
        a.n_kv = mask->ne[0];
        a.rows = q->ne[1];
        if (mask->type != GGML_TYPE_F16 && mask->type != GGML_TYPE_F32) {
            fail(std::string("--layout reads f16 or f32 masks, not ") + ggml_type_name(mask->type));
        }
        const int64_t n_tiles_kv = (a.n_kv + TILE - 1) / TILE;
        std::vector<char> live((size_t) (((a.rows + TILE - 1) / TILE) * n_tiles_kv), 0);
        Fnv digest;
        for (int64_t r = 0; r < a.rows; ++r) {
            const char * row = (const char *) mask->data + r * mask->nb[1];
            int64_t n = 0;
            std::vector<unsigned char> bits((size_t) a.n_kv);
            for (int64_t c = 0; c < a.n_kv; ++c) {
                const bool masked = mask->type == GGML_TYPE_F16
                                        ? ((const ggml_fp16_t *) row)[c] == 0xFC00  // f16 -inf
                                        : std::isinf(((const float *) row)[c]) && ((const float *) row)[c] < 0;
                bits[(size_t) c] = masked ? 0 : 1;
                if (!masked) {
                    n += 1;
                    live[(size_t) ((r / TILE) * n_tiles_kv + c / TILE)] = 1;
                }
            }
            digest.add(bits.data(), bits.size());
            a.unmasked.push_back(n);
        }
        for (const char x : live) {
            a.tiles += x;
        }
        a.mask_digest = digest.hex();
        Fnv params;
        params.add(node->op_params, sizeof node->op_params);
        a.params = params.hex();
        return a;
    }

    std::map<int, Layer> layers_;
};

// The KV caches' cells as llama.cpp's find_slot dumps them at LLAMA_KV_CACHE_DEBUG >= 3 (one dump per cache per
// ubatch, just before the ubatch is placed), collected from the log while `on` and printed whole as one JSON row
// for lab.engine.cells to read (the one reader of that dump, also of llama-server's log).
class CellsCapture {
  public:
    bool on = false;

    static void log(ggml_log_level level, const char * text, void * user) {
        auto * self = static_cast<CellsCapture *>(user);
        if (self->on && (level == GGML_LOG_LEVEL_DEBUG || level == GGML_LOG_LEVEL_CONT)) {
            self->text_ += text;
        }
        quiet_log(level, text, nullptr);
    }

    void clear() { text_.clear(); }

    void print(FILE * out, const std::string & where) const {
        fprintf(out, "{\"kind\":\"cells\",%s,\"dump\":%s}\n", where.c_str(), json_str(text_).c_str());
    }

  private:
    std::string text_;
};

}  // namespace labtool
