// A GPT-2 folder's config.json (xgrad/io/gpt2_config.hpp): every field checked, every problem
// naming the file and the field.
#include "xgrad/io/gpt2_config.hpp"

#include <cmath>

#include "json.hpp"

namespace xgrad::io {

namespace fs = std::filesystem;
using detail::Fields;
using xgrad::detail::json_text;

nn::GPTConfig parse_gpt2_config(const std::string& text, const std::string& source) {
    const nlohmann::json j = xgrad::detail::parse_json_unique_keys(text.data(), text.data() + text.size(), source);
    if (!j.is_object()) throw io_error(source + ": must hold a JSON object, got " + std::string(j.type_name()));
    const Fields f{j, source};
    nn::GPTConfig c;
    c.n_layer = f.positive("n_layer"), c.n_head = f.positive("n_head"), c.n_embd = f.positive("n_embd");
    c.block_size = f.positive("n_positions"), c.vocab_size = f.positive("vocab_size");
    c.dropout = 0;  // the resid_pdrop, embd_pdrop and attn_pdrop of training are not kept
    if (c.n_embd % c.n_head != 0) {
        std::string what = "is ";  // appended: g++ 12 -O3 takes "…" + std::string for an overlapping copy (-Wrestrict)
        what += std::to_string(c.n_head) + ", which does not divide n_embd " + std::to_string(c.n_embd);
        f.fail("n_head", what);
    }
    if (const nlohmann::json* v = f.find("model_type"); v && *v != "gpt2")
        f.fail("model_type", "is " + Fields::shown(*v) + "; this reader takes GPT-2 (\"gpt2\")");
    c.gelu = nn::GeluForm::tanh;  // GPT2Config's default activation, "gelu_new"
    if (const nlohmann::json* v = f.find("activation_function")) {
        if (!v->is_string()) f.fail("activation_function", "must be a string, got " + Fields::shown(*v));
        const std::string a = v->get<std::string>();
        if (a == "gelu") c.gelu = nn::GeluForm::erf;
        else if (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast")
            f.fail("activation_function", "is \"" + a + "\"; nn::GPT has the GELU only: \"gelu_new\", \"gelu_pytorch_tanh\", "
                                          "\"gelu_fast\" (the tanh form) or \"gelu\" (erf)");
    }
    if (const nlohmann::json* v = f.find("layer_norm_epsilon")) {  // GPT2Config's default: 1e-5
        if (!v->is_number()) f.fail("layer_norm_epsilon", "must be a number, got " + Fields::shown(*v));
        if (std::abs(v->get<double>() - 1e-5) > 1e-5 * 1e-9)
            f.fail("layer_norm_epsilon", "is " + json_text(*v) + "; nn::GPT's LayerNorms use 1e-5 (GPT-2's)");
    }
    if (const nlohmann::json* v = f.find("n_inner"); v && !v->is_null()) {
        if (!v->is_number_integer() || v->get<long long>() != (long long)(4 * c.n_embd))
            f.fail("n_inner", "is " + Fields::shown(*v) + "; nn::GPT's MLP has 4 * n_embd = " + std::to_string(4 * c.n_embd) +
                                  " units (null in GPT-2's configs)");
    }
    f.boolean_must_be("scale_attn_weights", true, "nn::GPT scales the attention scores by 1/sqrt(head size)");
    f.boolean_must_be("scale_attn_by_inverse_layer_idx", false, "nn::GPT does not scale scores by the layer index");
    f.boolean_must_be("add_cross_attention", false, "nn::GPT is a decoder without cross-attention");
    f.boolean_must_be("tie_word_embeddings", true, "nn::GPT's lm_head is wte (tied)");
    if (const nlohmann::json* v = f.find("bias")) {
        if (!v->is_boolean()) f.fail("bias", "must be true or false, got " + Fields::shown(*v));
        c.bias = v->get<bool>();
    }
    return c;
}

nn::GPTConfig read_gpt2_config(const fs::path& config_json) {
    return parse_gpt2_config(detail::read_text(config_json), config_json.string());
}

std::string gpt2_config_json(const nn::GPTConfig& c) {
    nlohmann::ordered_json j{{"model_type", "gpt2"},
                             {"architectures", nlohmann::ordered_json::array({"GPT2LMHeadModel"})},
                             {"n_layer", c.n_layer},
                             {"n_head", c.n_head},
                             {"n_embd", c.n_embd},
                             {"n_positions", c.block_size},
                             {"n_ctx", c.block_size},
                             {"vocab_size", c.vocab_size},
                             {"n_inner", nullptr},
                             {"activation_function", c.gelu == nn::GeluForm::tanh ? "gelu_new" : "gelu"},
                             {"layer_norm_epsilon", 1e-5},
                             {"resid_pdrop", c.dropout},
                             {"embd_pdrop", c.dropout},
                             {"attn_pdrop", c.dropout},
                             {"tie_word_embeddings", true}};
    if (!c.bias) j["bias"] = false;
    return json_text(j, 2) + "\n";
}

}  // namespace xgrad::io
