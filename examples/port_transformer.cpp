// A from-scratch "Attention Is All You Need" as a port of one would write it, line for line from
// code like hyunwoongko/transformer: its own scaled dot-product attention with masked_fill, its
// own multi-head split and concat, its own LayerNorm from mean and variance, embeddings with
// sinusoidal positions, an encoder-decoder stack. It learns to reverse a sequence. It is also the
// port-sized program bench/compile_time.sh times (a user's model that instantiates its own code).
#include <cmath>
#include <iostream>

#include <xtensor/xoperation.hpp>
#include <xtensor/xview.hpp>

#include <xgrad/xgrad.hpp>

using namespace xgrad;
using V3 = Var<float, 3>;
using V4 = Var<float, 4>;
constexpr std::size_t vocab = 12, pad = 0, bos = 1, d_model = 32, n_head = 4, d_ff = 64, len = 6, batch = 16;

// LayerNorm written out: gamma (x - mean) / sqrt(var + eps) + beta over the last axis.
struct MyLayerNorm {
    BOOST_HANA_DEFINE_STRUCT(MyLayerNorm, (Var<float, 1>, gamma), (Var<float, 1>, beta));
    MyLayerNorm() : gamma(parameter(xt::xtensor<float, 1>(xt::ones<float>({d_model})))),
                    beta(parameter(xt::xtensor<float, 1>(xt::zeros<float>({d_model})))) {}
    template <class X>
    V3 operator()(const X& input) const {
        const V3 x = module_input<float>(input);
        const V3 mu = mean(x, -1, keepdims);
        const V3 centered = x - mu;
        const V3 var = mean(square(centered), -1, keepdims);
        return gamma * centered / sqrt(var + 1e-12f) + beta;
    }
};

// q, k, v (B, H, L, D); mask (B, 1, L or 1, S) int, 0 = masked: softmax(q kᵀ / √D).masked_fill(-10000) v
V4 scaled_dot_product(const V4& q, const V4& k, const V4& v, const xt::xtensor<int, 4>& mask) {
    const V4 scores = matmul(q, transpose(k, 2, 3)) * (1.0f / std::sqrt(float(q.shape(3))));
    const V4 weights = softmax(masked_fill(scores, xt::equal(mask, 0), -10000.0), -1);
    return matmul(weights, v);
}

struct MyMultiHeadAttention {
    BOOST_HANA_DEFINE_STRUCT(MyMultiHeadAttention, (nn::Linear<float>, w_q), (nn::Linear<float>, w_k),
                             (nn::Linear<float>, w_v), (nn::Linear<float>, w_concat));
    explicit MyMultiHeadAttention(Generator& gen)
        : w_q(d_model, d_model, gen), w_k(d_model, d_model, gen), w_v(d_model, d_model, gen), w_concat(d_model, d_model, gen) {}
    // (B, L, d_model) -> (B, H, L, d_model / H)
    static V4 split(const V3& x) {
        return permute(reshape<4>(x, {long(x.shape(0)), long(x.shape(1)), long(n_head), -1}), {0, 2, 1, 3});
    }
    static V3 concat(const V4& x) {
        return reshape<3>(permute(x, {0, 2, 1, 3}), {long(x.shape(0)), long(x.shape(2)), long(d_model)});
    }
    V3 operator()(const V3& q, const V3& k, const V3& v, const xt::xtensor<int, 4>& mask) const {
        return w_concat(concat(scaled_dot_product(split(w_q(q)), split(w_k(k)), split(w_v(v)), mask)));
    }
};

struct FeedForward {
    BOOST_HANA_DEFINE_STRUCT(FeedForward, (nn::Linear<float>, linear1), (nn::Linear<float>, linear2));
    explicit FeedForward(Generator& gen) : linear1(d_model, d_ff, gen), linear2(d_ff, d_model, gen) {}
    V3 operator()(const V3& x) const { return linear2(relu(linear1(x))); }
};

struct EncoderLayer {
    BOOST_HANA_DEFINE_STRUCT(EncoderLayer, (MyMultiHeadAttention, attention), (MyLayerNorm, norm1), (FeedForward, ffn),
                             (MyLayerNorm, norm2));
    explicit EncoderLayer(Generator& gen) : attention(gen), ffn(gen) {}
    V3 operator()(const V3& x, const xt::xtensor<int, 4>& src_mask) const {
        const V3 h = norm1(attention(x, x, x, src_mask) + x);
        return norm2(ffn(h) + h);
    }
};

struct DecoderLayer {
    BOOST_HANA_DEFINE_STRUCT(DecoderLayer, (MyMultiHeadAttention, self_attention), (MyLayerNorm, norm1),
                             (MyMultiHeadAttention, enc_dec_attention), (MyLayerNorm, norm2), (FeedForward, ffn),
                             (MyLayerNorm, norm3));
    explicit DecoderLayer(Generator& gen) : self_attention(gen), enc_dec_attention(gen), ffn(gen) {}
    V3 operator()(const V3& y, const V3& memory, const xt::xtensor<int, 4>& trg_mask,
                  const xt::xtensor<int, 4>& src_mask) const {
        const V3 h = norm1(self_attention(y, y, y, trg_mask) + y);
        const V3 c = norm2(enc_dec_attention(h, memory, memory, src_mask) + h);
        return norm3(ffn(c) + c);
    }
};

struct Transformer {
    BOOST_HANA_DEFINE_STRUCT(Transformer, (nn::Embedding<float>, embed), (std::vector<EncoderLayer>, encoder),
                             (std::vector<DecoderLayer>, decoder), (nn::Linear<float>, out));
    xt::xtensor<float, 2> positions;  // (len, d_model): sin on even columns, cos on odd ones
    explicit Transformer(Generator& gen)
        : embed(vocab, d_model, gen), encoder{EncoderLayer(gen), EncoderLayer(gen)},
          decoder{DecoderLayer(gen), DecoderLayer(gen)}, out(d_model, vocab, gen), positions({len, d_model}) {
        for (std::size_t p = 0; p < len; ++p)
            for (std::size_t i = 0; i < d_model; i += 2) {
                const double angle = double(p) / std::pow(10000.0, double(i) / d_model);
                positions(p, i) = float(std::sin(angle)), positions(p, i + 1) = float(std::cos(angle));
            }
    }
    V3 operator()(const xt::xtensor<std::int64_t, 2>& src, const xt::xtensor<std::int64_t, 2>& trg) const {
        // src_mask (B, 1, 1, S): keys that are not padding; trg_mask (B, 1, L, L): also causal
        xt::xtensor<int, 4> src_mask = xt::zeros<int>({batch, std::size_t(1), std::size_t(1), len});
        xt::xtensor<int, 4> trg_mask = xt::zeros<int>({batch, std::size_t(1), len, len});
        for (std::size_t b = 0; b < batch; ++b)
            for (std::size_t j = 0; j < len; ++j) {
                src_mask(b, 0, 0, j) = src(b, j) != std::int64_t(pad);
                for (std::size_t i = j; i < len; ++i) trg_mask(b, 0, i, j) = trg(b, j) != std::int64_t(pad);
            }
        const auto pos = constant(positions);
        V3 x = embed(src) + pos;
        for (const auto& layer : encoder) x = layer(x, src_mask);
        V3 y = embed(trg) + pos;
        for (const auto& layer : decoder) y = layer(y, x, trg_mask, src_mask);
        return out(y);
    }
};

int main() {
    Generator gen(7);
    Transformer model(gen);
    optim::Adam<float> adam(model, {.lr = 2e-3});
    float first = 0, last = 0;
    for (int step = 0; step <= 300; ++step) {
        xt::xtensor<std::int64_t, 2> src({batch, len}), trg({batch, len}), target({batch, len});
        for (std::size_t b = 0; b < batch; ++b) {
            for (std::size_t j = 0; j < len; ++j) src(b, j) = std::int64_t(2 + gen.uniform() * (vocab - 2));
            for (std::size_t j = 0; j < len; ++j) target(b, j) = src(b, len - 1 - j);  // reversed
            trg(b, 0) = std::int64_t(bos);
            for (std::size_t j = 1; j < len; ++j) trg(b, j) = target(b, j - 1);
        }
        const V3 logits = model(src, trg);
        auto loss = cross_entropy(reshape<2>(logits, {long(batch * len), long(vocab)}),
                                  xt::xtensor<std::int64_t, 1>(xt::flatten(target)));
        adam.zero_grad();
        backward(loss);
        adam.step();
        if (step % 100 == 0) std::cout << "step " << step << "  loss " << loss.value()() << '\n';
        (step == 0 ? first : last) = loss.value()();
        tape().clear();
    }
    return last < first / 4 ? 0 : 1;
}
