# cython: language_level=3
# Declarations of the MNN LLM API subset in mnn_llm_api.h.

from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector


cdef extern from "<ostream>" namespace "std" nogil:
    cdef cppclass ostream:
        pass


cdef extern from "mnn_llm_api.h" namespace "MNN::Express" nogil:
    cdef cppclass VARP:
        VARP()


cdef extern from "mnn_llm_api.h" namespace "MNN::Transformer" nogil:
    cdef cppclass LlmContext:
        int prompt_len
        int gen_seq_len
        int all_seq_len
        int64_t load_us
        int64_t prefill_us
        int64_t decode_us
        int64_t sample_us
        int current_token

    cdef cppclass Llm:
        @staticmethod
        Llm* createLLM(const string& config_path)
        @staticmethod
        void destroy(Llm* llm)

        # MNN reports failures through return values and logs; the calls used
        # inside the nogil loop are declared non-throwing.
        cbool load() except +
        void generate_init(ostream* os, const char* end_with)
        vector[int] tokenizer_encode(const string& query) except +
        VARP forward(const vector[int]& input_ids, cbool is_prefill)
        VARP embedding(const vector[int]& input_ids)
        string tokenizer_decode(int token)
        cbool is_stop(int token)
        string apply_chat_template(const vector[pair[string, string]]& messages) except +
        void reset()
        size_t getCurrentHistory()
        void eraseHistory(size_t begin, size_t end)
        cbool set_config(const string& content) except +
        string dump_config() except +
        # a new Llm running the LoRA graph ``lora_path`` (joined to this model's directory, as MNN joins
        # every file name) over this one's module and weights; loaded, or NULL when MNN refused it
        Llm* create_lora(const string& lora_path) except +


cdef extern from "mnn_llm_api.h" namespace "mnn_engine" nogil:
    cdef cppclass TimingStreamBuf:
        long flushes
        long bytes
        int64_t first_ns
        int64_t last_ns

    LlmContext* llm_context(Llm* llm)
    const float* read_logits(const VARP& logits, int* size)
    void varp_reset(VARP& v)
    const float* read_all_logits(const VARP& logits, int* vocab, int* rows)
    cbool set_all_logits(Llm* llm, cbool on)
    Llm* create_embedding_model(const string& config_path)
    cbool embed_ids(Llm* llm, const vector[int]& ids, vector[float]* out)
    int64_t monotonic_ns()
    void run_mnn_response(Llm* llm, const vector[int]& ids, TimingStreamBuf* buf,
                          int max_new_tokens) except +


cdef extern from "build_info.h":
    const char* MNN_ENGINE_BUILD_VERSION
    const char* MNN_ENGINE_BUILD_MODE
    const char* MNN_ENGINE_BUILD_MNN_VERSION
    const char* MNN_ENGINE_BUILD_MNN_COMMIT
    const char* MNN_ENGINE_BUILD_MNN_SOURCE
    const char* MNN_ENGINE_BUILD_BACKENDS
    const char* MNN_ENGINE_BUILD_COMPILER
    const char* MNN_ENGINE_BUILD_CPU_FAMILY
    const char* MNN_ENGINE_BUILD_SYSTEM
    const char* MNN_ENGINE_BUILD_BUILDTYPE
    const char* MNN_ENGINE_BUILD_FLAGS
