// Data-parallel training (PyTorch's DistributedDataParallel): every rank holds the same model, runs
// forward and backward on its own shard of the batch, and the gradients are averaged over ranks
// before the optimizer step, so every rank takes the same step.
//
//   dist::DataParallel<float> dp(ctx, model);     // rank 0's parameters on every rank; names and
//                                                  // shapes compared (the first difference throws)
//   auto loss = cross_entropy(model(my_shard), my_targets);
//   backward(loss);
//   dp.synchronize();                              // gradients averaged over ranks
//   adam.step();
//
// Gradients travel in flat buckets of at most `bucket_bytes`, over the parameters in reverse
// declaration order (roughly the order backward finishes them), always in the same order; a
// parameter of a bucket's size or more starts a bucket of its own. With `overlap` (the default,
// not in deterministic mode) a bucket's reduction starts during backward, as soon as the tape walk
// has passed the last use of all its parameters (core/tape.hpp, BackwardObserver), from a packed
// copy; synchronize() reduces the rest, a bucket that holds one piece of one parameter in place on
// its gradient (MPI_Allreduce with MPI_IN_PLACE: no copy), and waits for the started ones. A parameter no rank gave a gradient
// keeps none; one that some ranks did not reach gets their zeros in the average (as in torch).
// `deterministic` sums each element in rank order (dist::ordered_allreduce_sum): bitwise the same
// on every rank and in every run. no_sync() skips the reduction for gradient accumulation.
#pragma once
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "xgrad/core/var.hpp"
#include "xgrad/dist/collectives.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::dist {

struct DataParallelOptions {
    std::size_t bucket_bytes = std::size_t(1) << 20;  // 1 MiB per bucket
    bool deterministic = false;  // each element summed in rank order (no overlap)
    bool overlap = true;         // start reducing during backward (ignored when deterministic)
    // Rank r's module generators (nn::Dropout's, ...) draw their masks from stream r
    // (Generator::set_stream): ranks drop different positions of their different data, as
    // torch.distributed users get from seeding each rank. false: every rank draws rank 0's masks.
    bool per_rank_dropout = true;
};

template <Real T>
class DataParallel : private BackwardObserver {
public:
    template <class M>
        requires Module<M>
    DataParallel(const Context& ctx, M& model, DataParallelOptions options = {})
        : ctx_(ctx), options_(options), tape_(&tape()) {
        if (options_.bucket_bytes < sizeof(T))
            throw value_error("DataParallel: bucket_bytes must hold at least one element, got " +
                              std::to_string(options_.bucket_bytes));
        std::set<const Node*> seen;  // a tied parameter is reduced once
        for_each_parameter(model, [&](const std::string& name, auto& var) {
            using V = std::remove_cvref_t<decltype(var)>;
            static_assert(std::same_as<typename V::value_type, T>,
                          "xgrad: DataParallel<T>: a parameter of the model has another dtype");
            if (!seen.insert(var.node()).second) return;
            V handle = var;
            params_.push_back({name, std::vector<std::size_t>(var.shape().begin(), var.shape().end()), var.size(),
                               var.node(), [handle]() mutable { return handle.value().data(); },
                               [handle]() -> const T* { return handle.has_grad() ? handle.grad().data() : nullptr; },
                               [handle] { return handle.node()->grad_buffer().data(); }});
        });
        check_same_parameters();
        if (options_.per_rank_dropout)
            for (auto& [name, gen] : named_generators(model)) gen->set_stream(std::uint64_t(ctx_.rank()));
        for (auto& p : params_) broadcast(ctx_, std::span<T>(p.value(), p.size));
        make_buckets();
        presence_.resize(params_.size());
        if (ctx_.world_size() > 1 && options_.overlap && !options_.deterministic) tape_->set_observer(this);
    }
    ~DataParallel() override {
        if (tape_->observer() == this) tape_->set_observer(nullptr);
    }
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    // Averages every parameter's gradient over the ranks (after backward, before the step).
    void synchronize();

    // While the returned guard lives, backward accumulates locally and synchronize() does nothing:
    //   { auto guard = dp.no_sync(); backward(loss1); }   backward(loss2); dp.synchronize();
    class NoSync {
    public:
        explicit NoSync(DataParallel& dp) : dp_(dp), previous_(dp.skip_) { dp_.skip_ = true; }
        ~NoSync() { dp_.skip_ = previous_; }
        NoSync(const NoSync&) = delete;
        NoSync& operator=(const NoSync&) = delete;

    private:
        DataParallel& dp_;
        bool previous_;
    };
    [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

    // Seconds synchronize() spent in its last call (waiting for and unpacking the reductions).
    double last_sync_seconds() const { return last_sync_seconds_; }
    std::size_t bucket_count() const { return buckets_.size(); }
    // Buckets whose reduction started during the last backward, before its last node (overlap).
    std::size_t buckets_started_in_backward() const { return started_in_backward_; }

private:
    struct Param {
        std::string name;
        std::vector<std::size_t> shape;
        std::size_t size;
        const Node* node;
        std::function<T*()> value;
        std::function<const T*()> grad;     // nullptr when no gradient reached it
        std::function<T*()> grad_for_write;  // creates a zero gradient when there is none
    };
    // A run of elements of one parameter inside a bucket.
    struct Piece {
        std::size_t param, from, count, at;
    };
    struct Bucket {
        std::vector<Piece> pieces;
        std::size_t size = 0;         // elements
        std::vector<T> sent, summed;  // packed gradients, and (started in backward) their sum over ranks
        std::size_t ready_at = 0;     // the walk has passed the last use of every parameter here
#if XGRAD_HAVE_MPI
        MPI_Request request = MPI_REQUEST_NULL;  // started during backward: summing into `summed`
#endif
    };

    void check_same_parameters();
    void make_buckets();
    void pack(Bucket& b) const {
        b.sent.resize(b.size);  // a no-op after the first step
        for (const Piece& piece : b.pieces) {
            const T* g = params_[piece.param].grad();
            if (g) std::memcpy(b.sent.data() + piece.at, g + piece.from, piece.count * sizeof(T));
            else std::memset(b.sent.data() + piece.at, 0, piece.count * sizeof(T));
        }
    }
    void start_in_backward(Bucket& b);
    void reduce_now(Bucket& b);
    void unpack(const Bucket& b, const T* sum, bool check);
    void sum_in_place(std::span<T> data) const {
        options_.deterministic ? ordered_allreduce_sum(ctx_, data) : allreduce_sum(ctx_, data);
    }

    // ---- BackwardObserver: start buckets during backward (overlap) ----
    void backward_begins(const Tape& tape, std::size_t root) override;
    void backward_passed(std::size_t position) override;

    const Context& ctx_;
    DataParallelOptions options_;
    Tape* tape_;
    std::vector<Param> params_;
    std::vector<Bucket> buckets_;
    std::vector<int> presence_;  // per parameter: how many ranks have a gradient
    std::size_t next_bucket_ = 0;  // buckets [0, next_bucket_) have started this round
    std::size_t started_in_backward_ = 0;
    bool skip_ = false;
    bool in_flight_ = false;  // a backward started buckets that synchronize() has not finished
    double last_sync_seconds_ = 0;
};

template <Real T>
void DataParallel<T>::check_same_parameters() {
    std::string mine;
    for (const auto& p : params_) mine += p.name + " " + shape_str(p.shape) + "\n";
    const std::string root = broadcast_string(ctx_, mine);
    std::string difference;
    if (mine != root) {
        // The first line that differs, from both sides.
        std::size_t at = 0, line = 0;
        while (at < mine.size() && at < root.size()) {
            const std::size_t a = mine.find('\n', at), b = root.find('\n', at);
            if (mine.compare(at, a - at, root, at, b - at) != 0) break;
            at = a + 1, ++line;
        }
        const auto line_of = [&](const std::string& s) {  // appended: `"\"" + string` trips g++ 12's -Wrestrict at -O3
            if (at >= s.size()) return std::string("nothing");
            return std::string(1, '"').append(s, at, s.find('\n', at) - at).append(1, '"');
        };
        difference = "DataParallel: the model differs between ranks: parameter " + std::to_string(line) + " is " +
                     line_of(mine) + " on rank " + std::to_string(ctx_.rank()) + " but " + line_of(root) +
                     " on rank 0";
    }
    // The lowest rank with a difference tells everyone, so every rank throws the same message.
    int first_bad = difference.empty() ? ctx_.world_size() : ctx_.rank();
    first_bad = -first_bad;
    allreduce_max(ctx_, std::span<int>(&first_bad, 1));
    first_bad = -first_bad;
    if (first_bad == ctx_.world_size()) return;
    throw value_error(broadcast_string(ctx_, difference, first_bad));
}

template <Real T>
void DataParallel<T>::make_buckets() {
    const std::size_t capacity = options_.bucket_bytes / sizeof(T);
    for (std::size_t i = params_.size(); i-- > 0;) {
        // A large parameter starts a fresh bucket: its full buckets are reduced in place.
        if (params_[i].size >= capacity && !buckets_.empty() && buckets_.back().size > 0) buckets_.emplace_back();
        for (std::size_t from = 0; from < params_[i].size;) {
            if (buckets_.empty() || buckets_.back().size == capacity) buckets_.emplace_back();
            Bucket& b = buckets_.back();
            const std::size_t count = std::min(capacity - b.size, params_[i].size - from);
            b.pieces.push_back({i, from, count, b.size});
            b.size += count;
            from += count;
        }
    }
}

// During backward (overlap): a non-blocking sum of a packed copy, which unpack() checks against
// the gradients (they must not have changed since).
template <Real T>
void DataParallel<T>::start_in_backward(Bucket& b) {
    pack(b);
    b.summed.resize(b.size);
#if XGRAD_HAVE_MPI
    detail::check(MPI_Iallreduce(b.sent.data(), b.summed.data(), int(b.size), detail::mpi_type<T>(), MPI_SUM,
                                 MPI_COMM_WORLD, &b.request),
                  "MPI_Iallreduce", ctx_);
#endif
}

// After backward: a blocking sum in place, on the gradient itself when the bucket is one piece.
template <Real T>
void DataParallel<T>::reduce_now(Bucket& b) {
    if (b.pieces.size() == 1) {
        const Piece& piece = b.pieces.front();
        if (presence_[piece.param] == 0) return;  // no rank has a gradient (the same on every rank)
        T* g = params_[piece.param].grad_for_write() + piece.from;
        sum_in_place(std::span<T>(g, piece.count));
        const T world = T(ctx_.world_size());
        for (std::size_t i = 0; i < piece.count; ++i) g[i] /= world;
        return;
    }
    pack(b);
    sum_in_place(std::span<T>(b.sent));
    unpack(b, b.sent.data(), false);
}

template <Real T>
void DataParallel<T>::unpack(const Bucket& b, const T* sum, bool check) {
    const T world = T(ctx_.world_size());
    for (const Piece& piece : b.pieces) {
        const Param& p = params_[piece.param];
        if (presence_[piece.param] == 0) continue;  // no rank has a gradient: it stays absent
        // Started during backward: the gradient must not have changed since (an op whose node does
        // not report its inputs would let a bucket start before its parameter's last use).
        if (const T* g = p.grad();
            check && g && std::memcmp(g + piece.from, b.sent.data() + piece.at, piece.count * sizeof(T)))
            throw tape_error("DataParallel: the gradient of \"" + p.name +
                             "\" changed after its reduction started during backward: an op on the tape does not "
                             "report its inputs (Node::for_each_input); construct DataParallel with overlap = false");
        T* out = p.grad_for_write() + piece.from;
        for (std::size_t i = 0; i < piece.count; ++i) out[i] = sum[piece.at + i] / world;
    }
}

template <Real T>
void DataParallel<T>::synchronize() {
    if (skip_ || ctx_.world_size() == 1) return;
    const auto t0 = std::chrono::steady_clock::now();
    // Which parameters have a gradient anywhere (one small reduction).
    for (std::size_t i = 0; i < params_.size(); ++i) presence_[i] = params_[i].grad() ? 1 : 0;
    allreduce_sum(ctx_, std::span<int>(presence_));
    const std::size_t started = next_bucket_;
    for (; next_bucket_ < buckets_.size(); ++next_bucket_) reduce_now(buckets_[next_bucket_]);
    next_bucket_ = 0;
    in_flight_ = false;
    // Every started reduction completes before anything can throw: no request is left behind.
#if XGRAD_HAVE_MPI
    for (std::size_t k = 0; k < started; ++k)
        detail::check(MPI_Wait(&buckets_[k].request, MPI_STATUS_IGNORE), "MPI_Wait", ctx_);
#endif
    for (std::size_t k = 0; k < started; ++k) unpack(buckets_[k], buckets_[k].summed.data(), true);
    last_sync_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <Real T>
void DataParallel<T>::backward_begins(const Tape& tape, std::size_t root) {
    started_in_backward_ = 0;
    if (skip_) return;
    if (in_flight_)
        throw tape_error("DataParallel: a second backward before synchronize(): accumulate gradients inside "
                         "no_sync(), then synchronize() after the last backward");
    // The lowest tape position that uses each parameter: its gradient is final once the walk has
    // passed it. Unused parameters are final from the start.
    std::unordered_map<const Node*, std::size_t> last_use;
    for (const auto& p : params_) last_use.emplace(p.node, std::numeric_limits<std::size_t>::max());
    bool any = false;
    for (std::size_t i = 0; i <= root; ++i)
        tape[i].for_each_input([&](const Node& input) {
            if (auto it = last_use.find(&input); it != last_use.end()) {
                it->second = std::min(it->second, i);
                any = true;
            }
        });
    if (!any) return;  // a backward that does not reach this model
    for (Bucket& b : buckets_) {
        b.ready_at = std::numeric_limits<std::size_t>::max();
        for (const Piece& piece : b.pieces) b.ready_at = std::min(b.ready_at, last_use[params_[piece.param].node]);
    }
    in_flight_ = true;
    next_bucket_ = 0;
}

template <Real T>
void DataParallel<T>::backward_passed(std::size_t position) {
    if (!in_flight_ || skip_) return;
    // In bucket order only: every rank issues the same collectives in the same order. What is
    // ready only at the last node (position 0) waits for synchronize(), which reduces it in place.
    while (position > 0 && next_bucket_ < buckets_.size() && position <= buckets_[next_bucket_].ready_at) {
        start_in_backward(buckets_[next_bucket_++]);
        ++started_in_backward_;
    }
#if XGRAD_HAVE_MPI
    // Drive the started reductions forward (Open MPI progresses non-blocking collectives only inside MPI calls).
    for (std::size_t k = 0; k < next_bucket_; ++k) {
        int done = 0;
        if (buckets_[k].request != MPI_REQUEST_NULL) MPI_Test(&buckets_[k].request, &done, MPI_STATUS_IGNORE);
    }
#endif
}

}  // namespace xgrad::dist
