// Which of MNN's ops give a token a different result alone than inside a batch.
//
//   row_probe CONFIG.json [MNN_CONFIG_JSON] [BATCH] [PROMPT_TOKENS] [first|last]
//
// Loads the model with MNN's debug mode (a callback after every op), prefills
// PROMPT_TOKENS tokens (default 20) of a fixed text, then runs one forward of
// the next token alone and, from the same prefix, one forward of it followed
// by BATCH-1 more tokens (default BATCH 8). For every op of the two forwards
// (matched by their order, which is the graph's), the part of the batched
// output that the lone forward computed (the lone output's extent along every
// dimension: the token's row, or the KV cache up to it) is compared with the
// lone output, byte for byte. One line per op:
//   INDEX TYPE NAME SHAPE_ALONE SHAPE_BATCH same|DIFF max_abs_diff
// and a last line "first_diff INDEX TYPE NAME" (or "first_diff none"). The
// ops that differ name the kernels to look at (tools/arm/kernels.gdb tells
// which ARM kernels ran). MNN_CONFIG_JSON is merged into the model's config
// (e.g. {"batch_independent_rows": true, "precision": "low"}). With "last",
// the token compared is the batch's last one: computed alone after the
// prompt and the batch's other tokens, against the batch's last row (then a
// row sees the same keys in both; with "first" the batch's row also has the
// masked keys of the tokens after it).
//
// Built by tools/mnn/build_row_probe.sh against a libMNN and its headers;
// used on x86 natively and on aarch64 under qemu (tools/arm/probe.sh).
#include <llm/llm.hpp>
#include <MNN/Interpreter.hpp>
#include <MNN/Tensor.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using MNN::Tensor;
using MNN::Transformer::Llm;

namespace {

const char* kText =
    "The history of the sea is long and full of storms, ships, and sailors who told stories about monsters. "
    "The history of the sea is long and full of storms, ships, and sailors who told stories about monsters. "
    "The history of the sea is long and full of storms, ships, and sailors who told stories about monsters. ";

struct Captured {
    std::string type;
    std::string name;
    std::vector<int> shape;
    int elementBytes = 0;
    bool isFloat = false;
    std::vector<unsigned char> data;  // logical (NCHW) layout, the tensor's own element type
};

struct Recorder {
    bool on = false;
    std::vector<Captured> ops;
};

Captured capture(const Tensor* t, const MNN::OperatorInfo* info) {
    Captured c;
    c.type = info->type();
    c.name = info->name();
    // the logical layout: NC4HW4 and fp16 device layouts are converted by the copy
    std::unique_ptr<Tensor> host(new Tensor(t, Tensor::CAFFE, true));
    if (!t->copyToHostTensor(host.get())) {
        return c;
    }
    c.shape = host->shape();
    c.elementBytes = host->getType().bytes();
    c.isFloat = host->getType().code == halide_type_float && c.elementBytes == 4;
    auto* p = host->host<unsigned char>();
    c.data.assign(p, p + static_cast<size_t>(host->elementSize()) * c.elementBytes);
    return c;
}

std::string shapeText(const std::vector<int>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out + "]";
}

// Compare the lone output with the same extent of the batched one. Returns
// -1 if the shapes do not nest, 0 if identical, 1 if they differ.
int compare(const Captured& alone, const Captured& batch, bool last, double* maxAbs) {
    *maxAbs = 0;
    if (alone.shape.size() != batch.shape.size() || alone.elementBytes != batch.elementBytes ||
        alone.data.empty() || batch.data.empty()) {
        return -1;
    }
    const size_t dims = alone.shape.size();
    for (size_t d = 0; d < dims; ++d) {
        if (alone.shape[d] > batch.shape[d]) return -1;
    }
    std::vector<size_t> strideA(dims + 1, 1), strideB(dims + 1, 1), offset(dims, 0);
    for (size_t d = 0; d < dims && last; ++d) offset[d] = batch.shape[d] - alone.shape[d];
    for (size_t d = dims; d-- > 0;) {
        strideA[d] = strideA[d + 1] * alone.shape[d];
        strideB[d] = strideB[d + 1] * batch.shape[d];
    }
    const size_t total = strideA[0];
    const size_t eb = alone.elementBytes;
    int result = 0;
    for (size_t i = 0; i < total; ++i) {
        size_t rest = i, j = 0;
        for (size_t d = 0; d < dims; ++d) {
            size_t index = rest / strideA[d + 1];
            rest %= strideA[d + 1];
            j += (index + offset[d]) * strideB[d + 1];
        }
        const unsigned char* a = alone.data.data() + i * eb;
        const unsigned char* b = batch.data.data() + j * eb;
        if (std::memcmp(a, b, eb) != 0) {
            result = 1;
            if (alone.isFloat) {
                float x, y;
                std::memcpy(&x, a, 4);
                std::memcpy(&y, b, 4);
                *maxAbs = std::fmax(*maxAbs, std::fabs(static_cast<double>(x) - y));
            }
        }
    }
    return result;
}

std::vector<Captured> run(Llm* llm, Recorder* rec, const std::vector<int>& prompt, const std::vector<int>& batch) {
    llm->reset();
    llm->generate_init(nullptr, nullptr);
    llm->forward(prompt, true);
    rec->ops.clear();
    rec->on = true;
    llm->forward(batch, false);
    rec->on = false;
    return rec->ops;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CONFIG.json [MNN_CONFIG_JSON] [BATCH] [PROMPT_TOKENS]\n", argv[0]);
        return 2;
    }
    const std::string extra = argc > 2 ? argv[2] : "{}";
    const int batchSize = argc > 3 ? std::atoi(argv[3]) : 8;
    const int promptTokens = argc > 4 ? std::atoi(argv[4]) : 20;
    const bool last = argc > 5 && std::string(argv[5]) == "last";
    std::unique_ptr<Llm> llm(Llm::createLLM(argv[1]));
    llm->set_config("{\"enable_debug\": true, \"all_logits\": true}");
    llm->set_config(extra);
    if (!llm->load()) {
        std::fprintf(stderr, "MNN could not load %s\n", argv[1]);
        return 1;
    }
    Recorder rec;
    llm->setDebugCallback(
        [](const std::vector<Tensor*>&, const MNN::OperatorInfo*) { return true; },
        [&rec](const std::vector<Tensor*>& outputs, const MNN::OperatorInfo* info) {
            if (rec.on && !outputs.empty()) rec.ops.push_back(capture(outputs[0], info));
            return true;
        });
    std::vector<int> ids = llm->tokenizer_encode(kText);
    if (static_cast<int>(ids.size()) < promptTokens + batchSize) {
        std::fprintf(stderr, "the text has %zu tokens, fewer than %d\n", ids.size(), promptTokens + batchSize);
        return 1;
    }
    std::vector<int> prompt(ids.begin(), ids.begin() + promptTokens);
    std::vector<int> batch(ids.begin() + promptTokens, ids.begin() + promptTokens + batchSize);
    const int lone = last ? promptTokens + batchSize - 1 : promptTokens;  // the compared token's position
    std::vector<int> before(ids.begin(), ids.begin() + lone);
    std::vector<int> alone(ids.begin() + lone, ids.begin() + lone + 1);
    auto a = run(llm.get(), &rec, before, alone);
    auto b = run(llm.get(), &rec, prompt, batch);
    // MNN runs another module (and op sequence) per row count: ops are matched
    // by name and occurrence, not by position
    std::map<std::string, std::vector<const Captured*>> byName;
    for (const auto& op : b) byName[op.name].push_back(&op);
    std::map<std::string, size_t> seen;
    long first = -1;
    for (size_t i = 0; i < a.size(); ++i) {
        const Captured* other = nullptr;
        auto found = byName.find(a[i].name);
        size_t k = seen[a[i].name]++;
        if (found != byName.end() && k < found->second.size()) other = found->second[k];
        double maxAbs = 0;
        int c = other == nullptr ? -1 : compare(a[i], *other, last, &maxAbs);
        const char* verdict = c == 0 ? "same" : c > 0 ? "DIFF" : "unmatched";
        if (c > 0 && first < 0) first = static_cast<long>(i);
        std::printf("%zu %s %s %s %s %s %.3g\n", i, a[i].type.c_str(), a[i].name.c_str(), shapeText(a[i].shape).c_str(),
                    other ? shapeText(other->shape).c_str() : "-", verdict, maxAbs);
    }
    std::printf("ops %zu alone, %zu batched\n", a.size(), b.size());
    if (first < 0) {
        std::printf("first_diff none\n");
    } else {
        std::printf("first_diff %ld %s %s\n", first, a[first].type.c_str(), a[first].name.c_str());
    }
    return 0;
}
