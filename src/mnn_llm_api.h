// The subset of MNN 3.6.1's C++ LLM API that mnn_engine uses.
//
// With MNN_ENGINE_USE_MNN_HEADERS defined (source builds: -Dmnn=system or
// subproject) this includes MNN's own headers. Otherwise (-Dmnn=wheel) it
// declares ABI-compatible stand-ins for the engine compiled into the PyPI wheel
// `mnn==3.6.1`, which ships no headers. Facts behind these declarations:
// docs in the project (mnn-3.6.1-abi). Rules for editing the stand-ins:
//   * virtual functions must stay in vtable order (placeholders included);
//   * non-virtual members must mangle exactly as in the wheel (same names,
//     namespaces, parameter types and const-ness);
//   * data members must keep MNN's layout up to the last field we read.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#ifdef MNN_ENGINE_USE_MNN_HEADERS

#include <MNN/expr/Expr.hpp>
#include <llm/llm.hpp>

#else  // declarations for the wheel engine

namespace MNN {
namespace Express {

class Variable;

// MNN's VARP is exactly one shared_ptr<Variable>; its copy and destruction are
// inline, so an identical layout is all the ABI needs.
class VARP {
public:
    std::shared_ptr<Variable> mContent;
    Variable* get() const { return mContent.get(); }
};

// halide_type_t as compiled into the wheel: 4-byte code, then bits, lanes.
struct halide_type_stub {
    int32_t code;
    uint8_t bits;
    uint8_t pad;
    uint16_t lanes;
};

class Variable {
public:
    struct Info {
        int order;
        std::vector<int> dim;
        halide_type_stub type;
        size_t size;
    };
    const Info* getInfo();
    // As in MNN's Expr.hpp: the public accessor is an inline template over the
    // exported (private there) readInternal.
    template <typename T>
    const T* readMap() {
        return static_cast<const T*>(readInternal(false));
    }

private:
    void* readInternal(bool forShape = false);
};

}  // namespace Express

namespace Transformer {

using Express::VARP;

enum class LlmStatus : int {
    NOT_LOADED = -1,
    RUNNING = 0,
    NORMAL_FINISHED = 1,
    MAX_TOKENS_FINISHED = 2,
    USER_CANCEL = 3,
    INTERNAL_ERROR = 4,
    TIMEOUT = 5,
};

struct LlmContext {
    int prompt_len;
    int gen_seq_len;
    int all_seq_len;
    std::ostream* os;
    std::string end_with;
    int64_t load_us;
    int64_t vision_us;
    int64_t audio_us;
    int64_t prefill_us;
    int64_t decode_us;
    int64_t sample_us;
    int64_t ttfa_us;
    float pixels_mp;
    float audio_input_s;
    int current_token;
    std::vector<int> history_tokens;
    std::vector<int> output_tokens;
    std::string generate_str;
    LlmStatus status;
    std::string log_buffer;
};

struct MultimodalPrompt;
using ChatMessage = std::pair<std::string, std::string>;
using ChatMessages = std::vector<ChatMessage>;

class Llm {
public:
    static Llm* createLLM(const std::string& config_path);
    static void destroy(Llm* llm);

    // vtable, in MNN's declaration order
    virtual ~Llm();
    virtual bool load();
    virtual VARP gen_attention_mask(int seq_len);
    virtual VARP gen_position_ids(int seq_len);
    virtual VARP embedding(const std::vector<int>& input_ids);
    virtual int sample(VARP logits, int offset = 0, int size = 0);
    virtual std::vector<VARP> forwardRaw(VARP hidden_state, VARP mask, VARP input_pos,
                                         std::vector<VARP> extra_args = {});
    virtual void response(const std::vector<int>& input_ids, std::ostream* os = nullptr,
                          const char* end_with = nullptr, int max_new_tokens = -1);
    virtual void generate_init(std::ostream* os = nullptr, const char* end_with = nullptr);
    virtual std::vector<int> tokenizer_encode(const std::string& query);
    virtual std::vector<int> tokenizer_encode(const MultimodalPrompt& prompt);
    // setWavformCallback and generateWavform follow; never called here.

    VARP forward(const std::vector<int>& input_ids, bool is_prefill = true);
    std::string tokenizer_decode(int token);
    bool is_stop(int token);
    std::string apply_chat_template(const ChatMessages& chat_prompts) const;
    void reset();
    bool set_config(const std::string& content);
    std::string dump_config();
    size_t getCurrentHistory() const;
    void eraseHistory(size_t begin, size_t end);
    Llm* create_lora(const std::string& lora_path);  // _ZN3MNN11Transformer3Llm11create_loraERKSs in the wheel

    LlmContext* context() const { return mContext.get(); }

    std::shared_ptr<LlmContext> mContext;
};

// A text-embedding model: an Llm whose graph outputs `sentence_embeddings`.
// Only non-virtual members are declared: the vtable is the wheel's own.
class Embedding : public Llm {
public:
    static Embedding* createEmbedding(const std::string& config_path, bool load = true);
    VARP ids_embedding(const std::vector<int>& ids);
    int dim() const;
};

}  // namespace Transformer
}  // namespace MNN

#endif  // MNN_ENGINE_USE_MNN_HEADERS

namespace mnn_engine {

// One accessor that works with both MNN's real header and the stand-ins.
inline MNN::Transformer::LlmContext* llm_context(MNN::Transformer::Llm* llm) {
#ifdef MNN_ENGINE_USE_MNN_HEADERS
    return const_cast<MNN::Transformer::LlmContext*>(llm->getContext());
#else
    return llm->context();
#endif
}

// A variable's float32 host data and its Info; nullptr when it is empty or not float32.
inline const float* float32_data(const MNN::Express::VARP& value, const MNN::Express::Variable::Info** info) {
    *info = nullptr;
    MNN::Express::Variable* var = value.get();
    if (var == nullptr) return nullptr;
    auto* found = var->getInfo();
    if (found == nullptr || static_cast<int>(found->type.code) != 2 || found->type.bits != 32) return nullptr;
    if (found->dim.empty() || found->dim.back() <= 0) return nullptr;
    const float* data = var->readMap<float>();
    if (data != nullptr) *info = found;
    return data;
}

// Every row of the logits of the last forward (with MNN's `all_logits` on, one
// row per input token): the host pointer, the vocabulary size and the number
// of rows; nullptr when the output is not float32.
inline const float* read_all_logits(const MNN::Express::VARP& logits, int* vocab, int* rows) {
    const MNN::Express::Variable::Info* info;
    const float* data = float32_data(logits, &info);
    *vocab = data == nullptr ? 0 : info->dim.back();
    *rows = data == nullptr ? 0 : static_cast<int>(info->size / static_cast<size_t>(*vocab));
    return data;
}

// Logits of the last position of the last forward (a forward returns only
// that row unless `all_logits` is on; the last row either way).
inline const float* read_logits(const MNN::Express::VARP& logits, int* size) {
    int rows = 0;
    const float* data = read_all_logits(logits, size, &rows);
    return data == nullptr ? nullptr : data + static_cast<size_t>(rows - 1) * *size;
}

// An embedding model, created unloaded (load() is the virtual Llm::load).
inline MNN::Transformer::Llm* create_embedding_model(const std::string& config_path) {
    return MNN::Transformer::Embedding::createEmbedding(config_path, false);
}

// The sentence embedding of ids (one forward, KV cache reset first) copied
// into out; false when MNN returns nothing or not float32.
inline bool embed_ids(MNN::Transformer::Llm* llm, const std::vector<int>& ids, std::vector<float>* out) {
    out->clear();
    auto* model = static_cast<MNN::Transformer::Embedding*>(llm);
    MNN::Express::VARP result = model->ids_embedding(ids);
    const MNN::Express::Variable::Info* info;
    const float* data = float32_data(result, &info);
    if (data == nullptr) return false;
    out->assign(data, data + info->size);
    return true;
}

// Turn MNN's `all_logits` on or off (forwards of several tokens then return a
// row per token); false when MNN refuses the config.
inline bool set_all_logits(MNN::Transformer::Llm* llm, bool on) noexcept {
    try {
        return llm->set_config(on ? "{\"all_logits\": true}" : "{\"all_logits\": false}");
    } catch (...) {
        return false;
    }
}

inline void varp_reset(MNN::Express::VARP& v) { v = MNN::Express::VARP(); }

inline int64_t monotonic_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A streambuf for MNN's own loop (`response`), the baseline our loop is
// benchmarked against. MNN flushes once per token, so sync() timestamps tokens.
class TimingStreamBuf : public std::streambuf {
public:
    long flushes = 0;
    long bytes = 0;
    int64_t first_ns = 0;
    int64_t last_ns = 0;
protected:
    int sync() override {
        last_ns = monotonic_ns();
        if (flushes++ == 0) first_ns = last_ns;
        return 0;
    }
    std::streamsize xsputn(const char*, std::streamsize n) override { bytes += n; return n; }
    int overflow(int ch) override { if (ch != EOF) ++bytes; return ch; }
};

// MNN's loop over prompt ids, writing to a TimingStreamBuf.
inline void run_mnn_response(MNN::Transformer::Llm* llm, const std::vector<int>& ids,
                             TimingStreamBuf* buf, int max_new_tokens) {
    std::ostream os(buf);
    llm->response(ids, &os, "", max_new_tokens);
}

}  // namespace mnn_engine
