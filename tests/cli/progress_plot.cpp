// The tool's progress line pieces and its PNG pictures, decoded again with cairo and checked pixel by pixel.
#include <doctest/doctest.h>

#include <cairo.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "study/plot.hpp"
#include "commands/progress.hpp"
#include "xgrad/core/error.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_cli_progress_plot {

using namespace xgrad::cli;

struct Decoded {
    int width = 0, height = 0;
    std::vector<std::uint32_t> pixels;  // 0x00RRGGBB, row-major
    std::size_t count(std::uint32_t rgb) const {
        std::size_t n = 0;
        for (auto p : pixels) n += (p & 0xffffff) == rgb;
        return n;
    }
};

// The PNG decoded by cairo's own reader: a picture any viewer can open decodes here too.
Decoded decode(const std::vector<unsigned char>& png) {
    REQUIRE(png.size() > 8);
    CHECK(std::memcmp(png.data(), "\x89PNG\r\n\x1a\n", 8) == 0);
    struct Reader {
        const std::vector<unsigned char>* png;
        std::size_t at = 0;
    } reader{&png};
    const auto read = [](void* closure, unsigned char* data, unsigned int length) {
        auto* r = static_cast<Reader*>(closure);
        if (r->at + length > r->png->size()) return CAIRO_STATUS_READ_ERROR;
        std::memcpy(data, r->png->data() + r->at, length);
        r->at += length;
        return CAIRO_STATUS_SUCCESS;
    };
    std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> s(
        cairo_image_surface_create_from_png_stream(read, &reader), cairo_surface_destroy);
    REQUIRE(cairo_surface_status(s.get()) == CAIRO_STATUS_SUCCESS);
    Decoded d;
    d.width = cairo_image_surface_get_width(s.get());
    d.height = cairo_image_surface_get_height(s.get());
    const int stride = cairo_image_surface_get_stride(s.get());
    const unsigned char* data = cairo_image_surface_get_data(s.get());
    for (int y = 0; y < d.height; ++y)
        for (int x = 0; x < d.width; ++x) d.pixels.push_back(reinterpret_cast<const std::uint32_t*>(data + y * stride)[x]);
    return d;
}

TEST_CASE("progress: clock, bar and fields") {
    CHECK(clock_str(0) == "0:00");
    CHECK(clock_str(61.4) == "1:01");
    CHECK(clock_str(3725) == "1:02:05");
    CHECK(clock_str(NAN) == "-:--");
    CHECK(bar_str(0, 10, 10) == "[----------]");
    CHECK(bar_str(5, 10, 10) == "[#####-----]");
    CHECK(bar_str(10, 10, 10) == "[##########]");
    CHECK(progress_fields(0.41234, 0.97, 812.2, 1.0) == "loss 0.4123  acc 0.9700  812 steps/s  ETA 0:01");
    CHECK(progress_fields(2.5, std::nullopt, 3, NAN) == "loss 2.5000  acc -  3 steps/s  ETA -:--");
}

TEST_CASE("attention picture: one heatmap per head, weight 1 in viridis yellow, 0 in its dark violet") {
    // 3 heads on 4 queries × 4 keys: head h puts all weight on key (i + h) % 4
    xt::xtensor<double, 3> w = xt::zeros<double>({3, 4, 4});
    for (std::size_t h = 0; h < 3; ++h)
        for (std::size_t i = 0; i < 4; ++i) w(h, i, (i + h) % 4) = 1.0;
    AttentionMaps maps{{"head 0", "head 1", "head 2"}, {"a", "b", "c", "|"}, {"a", "b", "c", "|"}, "three heads"};
    const Decoded d = decode(attention_grid_png(w, maps));
    // 4 × 4 cells of 28 px (240 / 4, at most 28); three panels side by side, then the colour bar
    CHECK(d.width > 3 * 4 * 28);
    CHECK(d.height > 4 * 28);
    const double cell_px = 28.0 * 28.0;
    const std::size_t yellow = d.count(0xfde725), violet = d.count(0x440154);
    // the maps' 1-px frame takes a row or column of the border cells' pixels
    CHECK(double(yellow) <= 3 * 4 * cell_px);
    CHECK(double(yellow) >= 0.9 * 3 * 4 * cell_px);
    CHECK(double(violet) <= 3 * 12 * cell_px);
    CHECK(double(violet) >= 0.9 * 3 * 12 * cell_px);

    // half weights give viridis' middle (teal), nowhere else in the picture
    const Decoded before = decode(attention_grid_png(w, maps));
    CHECK(before.count(0x21918c) == 0);
    xt::xtensor<double, 3> half = xt::zeros<double>({3, 4, 4});
    half(1, 2, 0) = half(1, 2, 1) = 0.5;
    const Decoded mid = decode(attention_grid_png(half, maps));
    CHECK(double(mid.count(0x21918c)) >= 0.9 * 2 * cell_px);
    CHECK(double(mid.count(0x21918c)) <= 2 * cell_px);

    CHECK_THROWS_WITH_AS(attention_grid_png(w, AttentionMaps{{"only one"}, {}, {}, ""}),
                         "attention picture: weights of shape (3, 4, 4) need 3 panel titles (got 1) and 4 query / 4 key "
                         "labels or none (got 0 / 0)",
                         xgrad::value_error);
}

TEST_CASE("loss chart: the curves in their colours, accuracy points on the right axis") {
    LossCurve c;
    for (int s = 1; s <= 500; ++s) c.steps.push_back(s), c.loss.push_back(2.3 * std::exp(-s / 100.0));
    for (int s = 50; s <= 500; s += 50) c.eval_steps.push_back(s), c.accuracy.push_back(std::min(1.0, s / 300.0));
    c.title = "a falling loss";
    const Decoded d = decode(loss_chart_png(c));
    CHECK(d.width == 900);
    CHECK(d.height == 520);
    // the smoothed loss (dark blue) and the accuracy line (orange) are drawn: hundreds of pixels each
    CHECK(d.count(0x1f59b5) > 300);
    CHECK(d.count(0xe67303) > 300);

    LossCurve bad = c;
    bad.loss.pop_back();
    CHECK_THROWS_WITH_AS(loss_chart_png(bad),
                         "loss chart: 500 steps, 499 losses, 10 evaluation steps, 10 accuracies: needs at least one "
                         "step or evaluation and one value per step",
                         xgrad::value_error);
    LossCurve evaluated_only = c;  // a run of 0 steps: the evaluation before training only
    evaluated_only.steps.clear(), evaluated_only.loss.clear();
    evaluated_only.eval_steps = {0}, evaluated_only.accuracy = {2.5};
    CHECK(!loss_chart_png(evaluated_only).empty());
}

}  // namespace test_cli_progress_plot
