// Every public module of xgrad in one program, built by tests/check_install.sh against the installed
// package with -Wall -Wextra -Werror (through pkg-config and through CMake): a user's program must see
// no warning that is not about its own code. xtensor comes first on purpose: a program may include
// it before xgrad. Exits 0 when every part ran and the model's loss fell.
#include <xtensor/xio.hpp>
#include <xtensor/xview.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include <xgrad/io/checkpoint.hpp>
#include <xgrad/io/gpt_formats.hpp>
#include <xgrad/io/npz.hpp>
#include <xgrad/io/state_dict.hpp>
#include <xgrad/text/corpus.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/xgrad.hpp>

using namespace xgrad;

struct Model {
    BOOST_HANA_DEFINE_STRUCT(Model, (nn::Embedding<float>, embed), (nn::PositionalEncoding<float>, pos),
                             (nn::Transformer<float>, transformer), (nn::MultiheadAttention<float>, attn),
                             (nn::LayerNorm<float>, norm), (nn::Linear<float>, head), (nn::Dropout, drop));
};

int main() {
    Generator gen(1);
    const std::size_t vocab = 11, d = 16, L = 6, B = 3;
    Model m{nn::Embedding<float>(vocab, d, gen),
            nn::PositionalEncoding<float>({.d_model = d, .dropout = 0.1, .batch_first = true, .max_len = 32}, gen),
            nn::Transformer<float>({.layer = {.d_model = d, .nhead = 2, .dim_feedforward = 32, .batch_first = true},
                                    .num_encoder_layers = 1, .num_decoder_layers = 1},
                                   gen),
            nn::MultiheadAttention<float>({.embed_dim = d, .num_heads = 4, .batch_first = true}, gen),
            nn::LayerNorm<float>(d), nn::Linear<float>(d, vocab, gen), nn::Dropout(0.1, gen)};
    optim::AdamW<float> adam(m, {.lr = 3e-3});
    const optim::WarmupCosine schedule(3e-3, 5, 40);
    xt::xtensor<std::int64_t, 2> tokens = xt::xtensor<std::int64_t, 2>::from_shape({B, L});
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens.data()[i] = std::int64_t((3 * i + 1) % vocab);
    const auto targets = xt::xtensor<std::int64_t, 1>(xt::flatten(tokens));
    nn::MhaForwardOptions<float> causal;
    causal.is_causal = true;
    float first = 0, last = 0;
    for (std::size_t step = 0; step < 40; ++step) {
        const auto x = m.pos(m.embed(tokens));                                       // (B, L, d)
        nn::TransformerForwardOptions<float> o;
        o.tgt_mask = nn::generate_square_subsequent_mask<float>(L);
        const auto h = m.transformer.forward(x, x, o);                                // (B, L, d)
        const auto a = m.attn.forward(h, h, h, causal);                               // output and weights
        const auto y = m.head(m.drop(m.norm(a.output + h)));                          // (B, L, vocab)
        const auto p = softmax(y, -1);
        auto loss = cross_entropy(reshape<2>(y, {long(B * L), long(vocab)}), targets);
        adam.set_lr(schedule.lr(step));
        adam.zero_grad();
        backward(loss);
        optim::clip_grad_norm(named_parameters<float>(m), 1.0);
        if (step == 0) {
            std::ostringstream listing;
            TapeGraph graph(tape());
            print_forward(listing, graph);
            print_backward(listing, graph);
            const std::string text = listing.str();
            std::printf("tape: %zu lines listed; softmax row sum %.6f\n", std::size_t(std::count(text.begin(), text.end(), '\n')),
                        double(xt::sum(xt::view(p.value(), 0, 0))()));
        }
        adam.step();
        (step == 0 ? first : last) = loss.value()();
        tape().clear();
    }
    // Gradcheck in double, files (.npy, .npz, a state dict, a checkpoint), the sampler-free rest.
    const auto check = gradcheck([](auto& u, auto& v) { return sum(tanh(matmul(u, v))); }, randn<2>({3, 4}, 2),
                                 randn<2>({4, 2}, 3));
    const auto dir = std::filesystem::temp_directory_path() / ("xgrad-all-modules-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    io::write_npy(dir / "tokens.npy", tokens);
    io::save_state_dict(m, dir / "model.npz");
    const auto loaded = io::read_npz(dir / "model.npz");
    io::save_checkpoint(dir / "checkpoint.npz", m, adam, 40, {{"data", &gen}});
    const auto step = io::load_checkpoint(dir / "checkpoint.npz", m, adam, {{"data", &gen}});

    // A GPT on characters: tokenizer and windows, AdamW with nanoGPT's decay groups, sampling with
    // the key/value cache, its llm.c file and nanoGPT state dict.
    const auto corpus = text::Corpus::from_string("to be or not to be, that is the question\n", "text");
    const auto chars = text::Tokenizer::characters(corpus.text());
    const text::Windows windows(corpus, chars, 0.25);
    nn::GPT<float> gpt({.n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = chars.vocab_size(),
                        .dropout = 0, .bias = true, .gelu = nn::GeluForm::tanh},
                       gen);
    optim::AdamW gpt_opt(optim::weight_decay_groups(gpt, 0.1), {.lr = 1e-2});
    xt::xtensor<std::int64_t, 2> gx, gy;
    float gpt_first = 0, gpt_last = 0;
    for (int s = 0; s < 30; ++s) {
        windows.batch(text::Split::train, 4, 8, gen, gx, gy);
        const auto gpt_loss = nn::gpt_loss(gpt(gx), gy);
        backward(gpt_loss);
        gpt_opt.step(), gpt_opt.zero_grad();
        (s == 0 ? gpt_first : gpt_last) = gpt_loss.value()();
        tape().clear();
    }
    set_training(gpt, false);
    const auto sample = nn::generate(gpt, xt::xtensor<std::int64_t, 2>{{chars.encode("t").front()}}, 12, gen,
                                     {.temperature = 0.8, .top_k = 5});
    io::save_llmc(gpt, dir / "gpt.bin", chars.vocab_size());
    io::save_state_dict(gpt, dir / "gpt.npz");
    io::load_gpt_state_dict(gpt, dir / "gpt.npz");
    const auto llmc = io::read_llmc(dir / "gpt.bin");
    std::filesystem::remove_all(dir);
    std::printf("loss %.4f -> %.4f; gradcheck %s; state dict of %zu arrays; checkpoint at step %lld\n", double(first),
                double(last), check.passed ? "passed" : "FAILED", loaded.size(), (long long)step);
    std::printf("GPT loss %.4f -> %.4f; sample \"%s\"; llm.c file of %zu parameters\n", double(gpt_first),
                double(gpt_last), chars.decode(std::vector<std::int64_t>(sample.begin(), sample.end())).c_str(),
                llmc.params.size());
    return check.passed && last < first && step == 40 && gpt_last < gpt_first ? 0 : 1;
}
