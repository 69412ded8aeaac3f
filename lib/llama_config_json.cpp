// A Llama folder's config.json (xgrad/io/llama_config_json.hpp): every field checked, every problem
// naming the file and the field.
#include "xgrad/io/llama_config_json.hpp"

#include "json.hpp"

namespace xgrad::io {

namespace fs = std::filesystem;
using detail::Fields;
using detail::read_text;
using xgrad::detail::json_text;

nn::LlamaConfig parse_hf_llama_config(const std::string& text, const std::string& source) {
    const nlohmann::json j = xgrad::detail::parse_json_unique_keys(text.data(), text.data() + text.size(), source);
    if (!j.is_object()) throw io_error(source + ": must hold a JSON object, got " + std::string(j.type_name()));
    const Fields f{j, source};
    if (const nlohmann::json* v = f.find("model_type"); !v || *v != "llama")
        f.fail("model_type", v ? "is " + Fields::shown(*v) + "; this reader takes a Llama (\"llama\")" : "is missing");
    const auto number = [&](const char* field, double fallback) {
        const nlohmann::json* v = f.find(field);
        if (!v || v->is_null()) return fallback;
        if (!v->is_number() || !(v->get<double>() > 0)) f.fail(field, "must be a positive number, got " + Fields::shown(*v));
        return v->get<double>();
    };
    nn::LlamaConfig c;
    c.dim = f.positive("hidden_size"), c.hidden_dim = f.positive("intermediate_size");
    c.n_layers = f.positive("num_hidden_layers"), c.n_heads = f.positive("num_attention_heads");
    c.n_kv_heads = f.find("num_key_value_heads") && !f.find("num_key_value_heads")->is_null()
                       ? f.positive("num_key_value_heads") : c.n_heads;
    c.vocab_size = f.positive("vocab_size");
    c.max_seq_len = f.find("max_position_embeddings") ? f.positive("max_position_embeddings") : 2048;
    c.norm_eps = number("rms_norm_eps", 1e-6);  // LlamaConfig's defaults
    c.rope_theta = number("rope_theta", 10000);
    c.dropout = 0;
    c.tie_embeddings = false;
    if (const nlohmann::json* v = f.find("tie_word_embeddings")) {
        if (!v->is_boolean()) f.fail("tie_word_embeddings", "must be true or false, got " + Fields::shown(*v));
        c.tie_embeddings = v->get<bool>();
    }
    if (const nlohmann::json* v = f.find("hidden_act"); v && *v != "silu")
        f.fail("hidden_act", "is " + Fields::shown(*v) + "; nn::Llama's feed-forward is SwiGLU (\"silu\")");
    if (const nlohmann::json* v = f.find("rope_scaling"); v && !v->is_null())
        f.fail("rope_scaling", "is set; nn::Llama's rotary embedding has no scaling (Llama 3.1's and others' are not read)");
    f.boolean_must_be("attention_bias", false, "nn::Llama's projections have no biases");
    f.boolean_must_be("mlp_bias", false, "nn::Llama's feed-forward has no biases");
    if (c.dim % c.n_heads != 0) f.fail("num_attention_heads", "does not divide hidden_size " + std::to_string(c.dim));
    if (const nlohmann::json* v = f.find("head_dim"); v && !v->is_null() && *v != c.dim / c.n_heads)
        f.fail("head_dim", "is " + Fields::shown(*v) + "; nn::Llama's heads are hidden_size / num_attention_heads = " +
                               std::to_string(c.dim / c.n_heads) + " wide");
    try {
        c.validate();
    } catch (const value_error& e) {
        throw io_error(source + ": " + e.what());
    }
    return c;
}

nn::LlamaConfig read_hf_llama_config(const fs::path& config_json) {
    return parse_hf_llama_config(read_text(config_json), config_json.string());
}

std::string hf_llama_config_json(const nn::LlamaConfig& c) {
    const nlohmann::ordered_json j{{"architectures", nlohmann::ordered_json::array({"LlamaForCausalLM"})},
                                   {"model_type", "llama"},
                                   {"hidden_size", c.dim},
                                   {"intermediate_size", c.ffn_hidden()},
                                   {"num_hidden_layers", c.n_layers},
                                   {"num_attention_heads", c.n_heads},
                                   {"num_key_value_heads", c.kv_heads()},
                                   {"vocab_size", c.vocab_size},
                                   {"max_position_embeddings", c.max_seq_len},
                                   {"rms_norm_eps", c.norm_eps},
                                   {"rope_theta", c.rope_theta},
                                   {"hidden_act", "silu"},
                                   {"tie_word_embeddings", c.tie_embeddings},
                                   {"rope_scaling", nullptr},
                                   {"attention_bias", false}};
    return json_text(j, 2) + "\n";
}

bool is_llama_folder(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec) || !fs::is_regular_file(dir / "config.json", ec)) return false;
    try {
        const std::string text = read_text(dir / "config.json");
        const std::optional<nlohmann::json> j = xgrad::detail::parse_json_or_none(text);
        return j && j->is_object() && j->value("model_type", "") == "llama";
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace xgrad::io
