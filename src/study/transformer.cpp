// `xgrad transformer`'s driver (study/transformer.hpp): the config, the checked inputs, one forward
// and backward of the module, the results written through an io::StagingDir.
#include "study/transformer.hpp"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "study/json_config.hpp"
#include "study/npy_inputs.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/nn/transformer.hpp"

namespace xgrad::cli {

TransformerConfig parse_transformer_config(const std::string& text, const std::string& source) {
    const nlohmann::json j = parse_config_object(text, source);
    const ConfigReader r(j, source);
    TransformerConfig c;
    const auto& module = r.get("module");
    static const std::set<std::string> modules{"encoder_layer", "decoder_layer", "encoder", "decoder", "transformer"};
    if (!module.is_string() || !modules.count(module.get<std::string>()))
        r.fail("module", "must be \"encoder_layer\", \"decoder_layer\", \"encoder\", \"decoder\" or \"transformer\", got " +
                             ConfigReader::shown(module));
    c.module = module.get<std::string>();
    const bool stack = c.module == "encoder" || c.module == "decoder", transformer = c.module == "transformer";
    std::set<std::string> fields{"module",         "d_model",     "nhead",     "dim_feedforward", "activation",
                                 "layer_norm_eps", "batch_first", "norm_first"};
    if (stack) fields.insert({"num_layers", "final_norm"});
    if (transformer) fields.insert({"num_encoder_layers", "num_decoder_layers"});
    if (!transformer) fields.insert("pos_embed");
    if (c.module == "decoder") fields.insert("return_intermediate");
    for (const auto& [key, value] : j.items())
        if (!fields.count(key)) throw io_error(source + ": unknown field \"" + key + "\" for module " + c.module);

    auto& lo = c.layer;
    lo.d_model = r.positive("d_model"), lo.nhead = r.positive("nhead"), lo.dim_feedforward = r.positive("dim_feedforward");
    lo.dropout = 0;
    const auto& act = r.get("activation");
    if (act != "relu" && act != "gelu")
        r.fail("activation", "must be \"relu\" or \"gelu\", got " + ConfigReader::shown(act));
    lo.activation = act == "gelu" ? nn::Activation::gelu : nn::Activation::relu;
    const auto& eps = r.get("layer_norm_eps");
    if (!eps.is_number() || !std::isfinite(eps.get<double>()) || eps.get<double>() < 0)
        r.fail("layer_norm_eps", "must be a finite number >= 0, got " + ConfigReader::shown(eps));
    lo.layer_norm_eps = eps.get<double>();
    lo.batch_first = r.boolean("batch_first"), lo.norm_first = r.boolean("norm_first");
    if (lo.d_model % lo.nhead != 0)
        r.fail("d_model", "(" + std::to_string(lo.d_model) + ") must be divisible by nhead (" + std::to_string(lo.nhead) + ")");
    if (stack) c.num_layers = r.positive("num_layers"), c.final_norm = r.boolean("final_norm");
    if (transformer) c.num_encoder_layers = r.positive("num_encoder_layers"), c.num_decoder_layers = r.positive("num_decoder_layers");
    c.pos_embed = j.contains("pos_embed") && r.boolean("pos_embed");
    c.return_intermediate = j.contains("return_intermediate") && r.boolean("return_intermediate");
    if (c.return_intermediate && !c.final_norm) r.fail("return_intermediate", "needs \"final_norm\": true");
    return c;
}

namespace {

bool decodes(const TransformerConfig& cfg) { return cfg.module != "encoder_layer" && cfg.module != "encoder"; }
// The input whose dtype and rank set the run's: src, or tgt for the decoders.
std::string first_input(const TransformerConfig& cfg) {
    return decodes(cfg) && cfg.module != "transformer" ? "tgt" : "src";
}

// The module's input arrays and masks, read and checked against the config and each other.
template <Real T, std::size_t N>
struct Problem {
    std::map<std::string, xt::xtensor<T, N>> inputs;  // src, tgt, memory, pos, query_pos as present
    std::map<std::string, AnyMask<T>> masks;          // by file name
    std::vector<std::size_t> output_shape;
};

template <Real T, std::size_t N>
Problem<T, N> read_problem(const fs::path& in, const TransformerConfig& cfg, const NpyArray& first) {
    const std::string& run_source = first.source;
    const bool bf = N == 3 && cfg.layer.batch_first;
    const std::size_t E = cfg.layer.d_model, H = cfg.layer.nhead;
    const std::size_t B = N == 3 ? first.shape[bf ? 0 : 1] : 1;
    const std::string& m = cfg.module;
    const bool encodes = m == "encoder_layer" || m == "encoder" || m == "transformer";
    const bool decodes = cli::decodes(cfg);
    Problem<T, N> p;
    std::map<std::string, std::size_t> length;  // of each sequence input
    // a sequence (len, B, E) / (B, len, E) / (len, E); `like` fixes its length to another input's
    auto sequence = [&](const std::string& name, const std::string& like = "") {
        const NpyArray a = *read_input(in, name);
        if (a.shape.size() != N)
            throw io_error(a.source + ": has shape " + shape_str(a.shape) + ", expected a " + std::to_string(N) +
                           "-D array like " + run_source);
        const std::size_t len = like.empty() ? a.shape[bf ? 1 : 0] : length.at(like);
        const std::vector<std::size_t> want = N == 2 ? std::vector<std::size_t>{len, E}
                                              : bf   ? std::vector<std::size_t>{B, len, E}
                                                     : std::vector<std::size_t>{len, B, E};
        expect_shape(a, want, like.empty() ? "(batch size from " + run_source + ", last dimension d_model)"
                                           : "(the shape of " + like + ".npy)");
        expect_dtype<T>(a, run_source);
        expect_finite(a);
        length[name] = len;
        p.inputs[name] = a.as<T, N>();
    };
    auto absent = [&](const std::string& name, const std::string& why) {
        if (read_input(in, name, false)) throw io_error((in / (name + ".npy")).string() + ": not an input " + why);
    };
    if (encodes) sequence("src");
    if (decodes) sequence("tgt");
    if (m == "decoder_layer" || m == "decoder") sequence("memory");
    const std::string keys = m == "transformer" ? "src" : decodes ? "memory" : "src";  // what pos goes with
    if (cfg.pos_embed) {
        sequence("pos", keys);
        if (decodes) sequence("query_pos", "tgt");
    } else {
        absent("pos", "without \"pos_embed\": true");
        absent("query_pos", "without \"pos_embed\": true");
    }
    using Shapes = std::vector<std::vector<std::size_t>>;
    auto attn_shapes = [&](std::size_t L, std::size_t S) {
        return Shapes{{L, S}, {N == 3 ? B * H : H, L, S}};
    };
    auto kpm_shapes = [&](std::size_t S) { return N == 3 ? Shapes{{B, S}} : Shapes{{S}}; };
    auto mask = [&](const std::string& name, bool used, const Shapes& allowed) {
        if (!used) return absent(name, "of " + m);
        if (auto a = read_mask<T>(in, name, allowed, run_source)) p.masks[name] = std::move(*a);
    };
    const std::size_t S = encodes ? length["src"] : length["memory"], Tn = decodes ? length["tgt"] : 0;
    mask("src_mask", encodes, encodes ? attn_shapes(S, S) : Shapes{});
    mask("src_key_padding_mask", encodes, kpm_shapes(S));
    mask("tgt_mask", decodes, attn_shapes(Tn, Tn));
    mask("memory_mask", decodes, attn_shapes(Tn, S));
    mask("tgt_key_padding_mask", decodes, kpm_shapes(Tn));
    mask("memory_key_padding_mask", decodes, kpm_shapes(S));
    const auto& out_like = decodes ? p.inputs.at("tgt") : p.inputs.at("src");
    p.output_shape.assign(out_like.shape().begin(), out_like.shape().end());
    if (cfg.return_intermediate) p.output_shape.insert(p.output_shape.begin(), cfg.num_layers);
    return p;
}

template <Real T, std::size_t N>
TransformerResults run_typed(const fs::path& in, const TransformerConfig& cfg, const NpyArray& first, const OutputRow& keep) {
    Problem<T, N> p = read_problem<T, N>(in, cfg, first);
    NpyArray grad_file = *read_input(in, "grad_output");
    expect_dtype<T>(grad_file, first.source);
    expect_shape(grad_file, p.output_shape, cfg.return_intermediate ? "((num_layers,) + tgt's shape)" : "(the output's shape)");
    expect_finite(grad_file);
    keep_output_row(grad_file.bytes.data(), sizeof(T), grad_file.shape, N == 3, cfg.layer.batch_first, keep);

    std::map<std::string, Var<T, N>> vars;  // named for tape listings (xgrad inspect)
    for (const auto& [name, x] : p.inputs) vars[name] = named(parameter(x), name);
    auto var = [&](const std::string& name) { return vars.count(name) ? vars.at(name) : Var<T, N>{}; };
    auto mask = [&](const std::string& name) { return p.masks.count(name) ? p.masks.at(name) : AnyMask<T>{}; };
    nn::EncoderForwardOptions<T, N> eo;
    eo.src_mask = mask("src_mask"), eo.src_key_padding_mask = mask("src_key_padding_mask"), eo.pos = var("pos");
    nn::DecoderForwardOptions<T, N> d;
    d.tgt_mask = mask("tgt_mask"), d.memory_mask = mask("memory_mask");
    d.tgt_key_padding_mask = mask("tgt_key_padding_mask"), d.memory_key_padding_mask = mask("memory_key_padding_mask");
    d.pos = var("pos"), d.query_pos = var("query_pos");

    TransformerResults results;
    results.description = cfg.module + " d_model=" + std::to_string(cfg.layer.d_model) + " nhead=" +
                           std::to_string(cfg.layer.nhead) + ", " + first_input(cfg) + " " +
                           shape_str(first.shape) + " " + dtype_name(first.dtype) +
                           "; backward from the output with grad_output.npy";
    // loads the parameters by name, runs forward(module) and backward, collects every result
    auto run = [&](auto module, auto forward) {
        for_each_parameter(module, [&](const std::string& name, auto& v) {
            const NpyArray a = *read_input(in, name);
            expect_dtype<T>(a, first.source);
            expect_shape(a, std::vector<std::size_t>(v.shape().begin(), v.shape().end()), "(from config.json)");
            expect_finite(a);
            a.copy_to(v.value().data());
            named(v, name);
        });
        const auto output = named(forward(module), "output");
        constexpr std::size_t R = std::remove_cvref_t<decltype(output)>::rank;
        const auto seed = grad_file.as<T, R>();
        results.loss = double(xt::sum(xt::cast<double>(output.value() * seed))());
        backward(output, seed);
        auto& files = results.files;
        files["output"] = NpyArray::from(output.value());
        for (const auto& [name, v] : vars) files["grad." + name] = NpyArray::from(v.grad());
        for_each_parameter(module, [&](const std::string& name, const auto& v) {
            files["grad." + name] = NpyArray::from(v.grad());
        });
    };
    Generator gen;
    const auto& lo = cfg.layer;
    auto norm = [&] { return cfg.final_norm ? std::optional(nn::LayerNorm<T>(lo.d_model, lo.layer_norm_eps)) : std::nullopt; };
    const auto src = var("src"), tgt = var("tgt"), memory = var("memory");
    if (cfg.module == "encoder_layer") {
        run(nn::TransformerEncoderLayer<T>(lo, gen), [&](const auto& m) { return m.forward(src, eo); });
    } else if (cfg.module == "encoder") {
        run(nn::TransformerEncoder<T>(nn::TransformerEncoderLayer<T>(lo, gen), cfg.num_layers, norm()),
            [&](const auto& m) { return m.forward(src, eo); });
    } else if (cfg.module == "decoder_layer") {
        run(nn::TransformerDecoderLayer<T>(lo, gen), [&](const auto& m) { return m.forward(tgt, memory, d); });
    } else if (cfg.module == "decoder") {
        nn::TransformerDecoder<T> dec(nn::TransformerDecoderLayer<T>(lo, gen), cfg.num_layers, norm());
        if (cfg.return_intermediate) run(dec, [&](const auto& m) { return m.forward_intermediate(tgt, memory, d); });
        else run(dec, [&](const auto& m) { return m.forward(tgt, memory, d); });
    } else {
        nn::TransformerOptions to{lo, cfg.num_encoder_layers, cfg.num_decoder_layers};
        nn::TransformerForwardOptions<T> o;
        o.src_mask = eo.src_mask, o.src_key_padding_mask = eo.src_key_padding_mask;
        o.tgt_mask = d.tgt_mask, o.memory_mask = d.memory_mask;
        o.tgt_key_padding_mask = d.tgt_key_padding_mask, o.memory_key_padding_mask = d.memory_key_padding_mask;
        run(nn::Transformer<T>(to, gen), [&](const auto& m) { return m.forward(src, tgt, o); });
    }
    return results;
}

}  // namespace

bool is_transformer_folder(const fs::path& in) {
    std::error_code ec;
    if (!fs::is_regular_file(in / "config.json", ec)) return false;
    const fs::path config = in / "config.json";
    return parse_config_object(read_config_text(config), config.string()).contains("module");
}

TransformerConfig read_transformer_config(const fs::path& in) {
    const fs::path config = in / "config.json";
    return parse_transformer_config(read_config_text(config), config.string());
}

TransformerResults compute_transformer(const fs::path& in, const OutputRow& keep) {
    const TransformerConfig cfg = read_transformer_config(in);
    const NpyArray first = *read_input(in, first_input(cfg));
    if (first.shape.size() != 2 && first.shape.size() != 3)
        throw io_error(first.source + ": has shape " + shape_str(first.shape) + ", expected 3-D (batched) or 2-D (unbatched)");
    if (first.shape.back() != cfg.layer.d_model)
        throw io_error(first.source + ": has shape " + shape_str(first.shape) + ", its last dimension must be d_model = " +
                       std::to_string(cfg.layer.d_model));
    const bool batched = first.shape.size() == 3;
    if (first.dtype == Dtype::float32) return batched ? run_typed<float, 3>(in, cfg, first, keep) : run_typed<float, 2>(in, cfg, first, keep);
    if (first.dtype == Dtype::float64) return batched ? run_typed<double, 3>(in, cfg, first, keep) : run_typed<double, 2>(in, cfg, first, keep);
    throw io_error(first.source + ": has dtype " + dtype_name(first.dtype) + ", expected float32 or float64");
}

void run_transformer(const fs::path& in, const fs::path& out) {
    io::StagingDir::check_target(out);
    const TransformerResults results = compute_transformer(in);
    io::StagingDir stage(out);
    for (const auto& [name, a] : results.files) io::write_npy(stage.file(name + ".npy"), a);
    stage.commit();
}

}  // namespace xgrad::cli
