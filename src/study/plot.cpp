// The tool's pictures with cairo: a loss chart and a grid of attention heatmaps (study/plot.hpp).
#include "study/plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include <cairo.h>
#include <fmt/core.h>

#include "xgrad/core/error.hpp"
#include "xgrad/io/file.hpp"

namespace xgrad::cli {
namespace {

struct SurfaceFree {
    void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextFree {
    void operator()(cairo_t* c) const { cairo_destroy(c); }
};

// A white canvas of w × h pixels with a cairo context on it.
class Canvas {
public:
    Canvas(int w, int h)
        : surface_(cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h)), cr_(cairo_create(surface_.get())) {
        cairo_set_source_rgb(cr(), 1, 1, 1);
        cairo_paint(cr());
        cairo_select_font_face(cr(), "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    }
    cairo_t* cr() const { return cr_.get(); }

    // Text of `size` points whose anchor point (ax, ay) in [0, 1]² of its box sits at (x, y);
    // rotated by -90° when `vertical` (an axis title on the left, labels read bottom to top).
    void text(const std::string& s, double x, double y, double size, double ax = 0.5, double ay = 0.5,
              bool vertical = false) const {
        cairo_set_font_size(cr(), size);
        cairo_text_extents_t e;
        cairo_text_extents(cr(), s.c_str(), &e);
        cairo_save(cr());
        cairo_translate(cr(), x, y);
        if (vertical) cairo_rotate(cr(), -M_PI / 2);
        cairo_move_to(cr(), -e.x_bearing - ax * e.width, -e.y_bearing - ay * e.height);
        cairo_set_source_rgb(cr(), 0.1, 0.1, 0.1);
        cairo_show_text(cr(), s.c_str());
        cairo_restore(cr());
    }
    void line(double x0, double y0, double x1, double y1, double width = 1) const {
        cairo_move_to(cr(), x0, y0);
        cairo_line_to(cr(), x1, y1);
        cairo_set_line_width(cr(), width);
        cairo_stroke(cr());
    }

    // The PNG image; what to call it in a message on failure.
    std::vector<unsigned char> png(const std::string& what) const {
        cairo_surface_flush(surface_.get());
        std::vector<unsigned char> out;
        const auto append = [](void* closure, const unsigned char* data, unsigned int length) {
            auto* v = static_cast<std::vector<unsigned char>*>(closure);
            v->insert(v->end(), data, data + length);
            return CAIRO_STATUS_SUCCESS;
        };
        cairo_status_t status = cairo_status(cr());
        if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_write_to_png_stream(surface_.get(), append, &out);
        if (status != CAIRO_STATUS_SUCCESS)
            throw io_error(what + ": cannot draw the picture: " + cairo_status_to_string(status));
        return out;
    }

private:
    std::unique_ptr<cairo_surface_t, SurfaceFree> surface_;
    std::unique_ptr<cairo_t, ContextFree> cr_;
};

// Tick values covering [lo, hi] at a step of 1, 2 or 5 × 10^k, about `count` of them.
std::vector<double> nice_ticks(double lo, double hi, int count) {
    if (!(hi > lo)) return {lo};
    const double raw = (hi - lo) / count, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    double step = magnitude;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * magnitude >= raw) {
            step = m * magnitude;
            break;
        }
    std::vector<double> ticks;
    for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
    return ticks;
}

std::string tick_label(double v) {
    if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) return fmt::format("{:.0e}", v);
    std::string s = fmt::format("{:.3f}", v);
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
}

// A colour from 8-bit channels: exact in the 8-bit PNG.
struct Rgb {
    int r, g, b;
};
void set_colour(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

constexpr Rgb raw_loss_colour{173, 204, 237}, mean_loss_colour{31, 89, 181}, accuracy_colour{230, 115, 3};

// Matplotlib's viridis at 0, 1/4, 1/2, 3/4 and 1, linearly interpolated.
Rgb viridis(double t) {
    static constexpr Rgb anchors[5] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0) * 4;
    const int k = std::min(int(t), 3);
    const double f = t - k;
    const auto mix = [f](int a, int b) { return int(std::lround(a + f * (b - a))); };
    return {mix(anchors[k].r, anchors[k + 1].r), mix(anchors[k].g, anchors[k + 1].g), mix(anchors[k].b, anchors[k + 1].b)};
}

}  // namespace

std::vector<unsigned char> loss_chart_png(const LossCurve& c) {
    constexpr int W = 900, H = 520;
    constexpr double left = 80, right = 80, top = 50, bottom = 60;
    const double pw = W - left - right, ph = H - top - bottom;
    if ((c.steps.empty() && c.eval_steps.empty()) || c.steps.size() != c.loss.size() ||
        c.eval_steps.size() != c.accuracy.size())
        throw value_error(fmt::format("loss chart: {} steps, {} losses, {} evaluation steps, {} accuracies: needs at "
                                      "least one step or evaluation and one value per step",
                                      c.steps.size(), c.loss.size(), c.eval_steps.size(), c.accuracy.size()));
    Canvas cv(W, H);
    cairo_t* cr = cv.cr();
    const auto& xs = c.steps.empty() ? c.eval_steps : c.steps;  // a run of 0 steps has its evaluation only
    const double x0 = xs.front(), x1 = std::max(xs.back(), x0 + 1);
    double y1 = 0;
    for (double l : c.loss)
        if (std::isfinite(l)) y1 = std::max(y1, l);
    if (c.score_is_loss)
        for (double l : c.accuracy)
            if (std::isfinite(l)) y1 = std::max(y1, l);
    y1 = y1 > 0 ? y1 * 1.05 : 1;
    const auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
    const auto py = [&](double y) { return top + ph - y / y1 * ph; };  // loss axis, from 0
    const auto pa = [&](double a) { return c.score_is_loss ? top + ph - a / y1 * ph : top + ph - a * ph; };  // [0, 1]

    // grid, ticks and labels
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    for (double t : nice_ticks(0, y1, 6)) cv.line(left, py(t), left + pw, py(t));
    for (double t : nice_ticks(x0, x1, 8)) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cv.line(px(t), top, px(t), top + ph);
        cv.text(tick_label(t), px(t), top + ph + 8, 12, 0.5, 0);
    }
    for (double t : nice_ticks(0, y1, 6)) cv.text(tick_label(t), left - 8, py(t), 12, 1, 0.5);
    if (!c.score_is_loss)
        for (double t : {0.0, 0.25, 0.5, 0.75, 1.0}) cv.text(tick_label(t), left + pw + 8, pa(t), 12, 0, 0.5);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_rectangle(cr, left, top, pw, ph);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    cv.text("training step", left + pw / 2, H - 18, 14);
    cv.text("cross-entropy loss", 22, top + ph / 2, 14, 0.5, 0.5, true);
    if (!c.score_is_loss) cv.text(c.accuracy_name, W - 22, top + ph / 2, 14, 0.5, 0.5, true);
    cv.text(c.title, W / 2.0, 24, 15);

    cairo_save(cr);
    cairo_rectangle(cr, left, top, pw, ph);
    cairo_clip(cr);
    // the raw loss, light, then its moving average over 1/50 of the run
    const auto polyline = [&](const std::vector<double>& xs, const std::vector<double>& ys, auto to_y) {
        bool pen = false;
        for (std::size_t i = 0; i < xs.size(); ++i) {
            if (!std::isfinite(ys[i])) {
                pen = false;
                continue;
            }
            pen ? cairo_line_to(cr, px(xs[i]), to_y(ys[i])) : cairo_move_to(cr, px(xs[i]), to_y(ys[i]));
            pen = true;
        }
    };
    set_colour(cr, raw_loss_colour);
    polyline(c.steps, c.loss, py);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    const std::size_t window = std::max<std::size_t>(1, c.loss.size() / 50);
    std::vector<double> smooth(c.loss.size());
    double sum = 0;
    for (std::size_t i = 0; i < c.loss.size(); ++i) {
        sum += c.loss[i] - (i >= window ? c.loss[i - window] : 0.0);
        smooth[i] = sum / double(std::min(i + 1, window));
    }
    set_colour(cr, mean_loss_colour);
    polyline(c.steps, smooth, py);
    cairo_set_line_width(cr, 2.2);
    cairo_stroke(cr);
    set_colour(cr, accuracy_colour);
    polyline(c.eval_steps, c.accuracy, pa);
    cairo_set_line_width(cr, 2.2);
    cairo_stroke(cr);
    // each evaluation a dot: the line between two is not measured
    const auto evaluation_dot = [&](double x, double y) {
        cairo_new_sub_path(cr);  // no line from the current point (a legend's text) to the dot
        cairo_arc(cr, x, y, 4.5, 0, 2 * M_PI);
        cairo_fill_preserve(cr);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_set_line_width(cr, 1.5);
        cairo_stroke(cr);
        set_colour(cr, accuracy_colour);
    };
    for (std::size_t i = 0; i < c.eval_steps.size(); ++i) evaluation_dot(px(c.eval_steps[i]), pa(c.accuracy[i]));
    cairo_restore(cr);

    // legend, right of the middle: the loss falls below it, the accuracy rises above it
    const double lx = left + pw - 320, ly = top + 0.4 * ph;
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_rectangle(cr, lx - 10, ly - 10, 320, 64);
    cairo_fill(cr);
    const std::array<std::pair<Rgb, std::string>, 3> entries{{{raw_loss_colour, "loss per step"},
                                                              {mean_loss_colour, fmt::format("loss, mean of {} steps", window)},
                                                              {accuracy_colour, fmt::format("{}, {} evaluations",
                                                                                            c.score_is_loss ? c.accuracy_name : "held-out accuracy",
                                                                                            c.eval_steps.size())}}};
    for (std::size_t i = 0; i < entries.size(); ++i) {
        set_colour(cr, entries[i].first);
        cv.line(lx, ly + 20 * double(i), lx + 28, ly + 20 * double(i), 2.2);
        cv.text(entries[i].second, lx + 36, ly + 20 * double(i), 12, 0, 0.5);
    }
    evaluation_dot(lx + 14, ly + 40);
    return cv.png("loss chart");
}

std::vector<unsigned char> attention_grid_png(const xt::xtensor<double, 3>& w, const AttentionMaps& m) {
    const std::size_t heads = w.shape(0), L = w.shape(1), S = w.shape(2);
    if (heads == 0 || L == 0 || S == 0 || m.panel_titles.size() != heads ||
        (!m.query_labels.empty() && m.query_labels.size() != L) || (!m.key_labels.empty() && m.key_labels.size() != S))
        throw value_error(fmt::format("attention picture: weights of shape ({}, {}, {}) need {} panel titles (got {}) "
                                      "and {} query / {} key labels or none (got {} / {})",
                                      heads, L, S, heads, m.panel_titles.size(), L, S, m.query_labels.size(),
                                      m.key_labels.size()));
    const double cell = std::clamp(240.0 / double(std::max(L, S)), 4.0, 28.0);
    const double map_w = cell * double(S), map_h = cell * double(L);
    const bool labels = cell >= 9;  // token labels only where they fit
    std::size_t longest_key = 0;
    for (const auto& k : m.key_labels) longest_key = std::max(longest_key, k.size());
    const bool upright_keys = longest_key > 1;  // read bottom to top, so that neighbours do not overlap
    const double key_band = labels ? (upright_keys ? 8.0 + 7.0 * double(longest_key) : 18.0) : 0.0;
    const double pad_left = labels ? 70 : 40, pad_top = 34, pad_bottom = 40 + key_band, gap = 24;
    const std::size_t cols = std::min<std::size_t>(heads, 4), rows = (heads + cols - 1) / cols;
    const double panel_w = pad_left + map_w + gap, panel_h = pad_top + map_h + pad_bottom;
    const double bar_w = 90, head_h = 44;
    Canvas cv(int(std::ceil(double(cols) * panel_w + bar_w + 20)), int(std::ceil(head_h + double(rows) * panel_h + 10)));
    cairo_t* cr = cv.cr();
    cv.text(m.title, (double(cols) * panel_w + bar_w) / 2, 22, 15);
    for (std::size_t h = 0; h < heads; ++h) {
        const double ox = 10 + double(h % cols) * panel_w + pad_left, oy = head_h + double(h / cols) * panel_h + pad_top;
        for (std::size_t i = 0; i < L; ++i)
            for (std::size_t j = 0; j < S; ++j) {
                set_colour(cr, viridis((w(h, i, j) - m.low) / (m.high - m.low)));
                cairo_rectangle(cr, ox + double(j) * cell, oy + double(i) * cell, cell, cell);
                cairo_fill(cr);
            }
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        cairo_rectangle(cr, ox, oy, map_w, map_h);
        cairo_set_line_width(cr, 1);
        cairo_stroke(cr);
        cv.text(m.panel_titles[h], ox + map_w / 2, oy - 14, 13);
        const double font = std::min(11.0, cell * 0.8);
        if (labels) {
            for (std::size_t j = 0; j < S && !m.key_labels.empty(); ++j)
                upright_keys ? cv.text(m.key_labels[j], ox + (double(j) + 0.5) * cell, oy + map_h + 4, font, 1, 0.5, true)
                             : cv.text(m.key_labels[j], ox + (double(j) + 0.5) * cell, oy + map_h + 4, font, 0.5, 0);
            for (std::size_t i = 0; i < L && !m.query_labels.empty(); ++i)
                cv.text(m.query_labels[i], ox - 4, oy + (double(i) + 0.5) * cell, font, 1, 0.5);
        }
        cv.text(m.columns, ox + map_w / 2, oy + map_h + pad_bottom - 18, 12);
        cv.text(m.rows, ox - pad_left + 12, oy + map_h / 2, 12, 0.5, 0.5, true);
    }
    // the colour bar: low at the bottom, high at the top
    const double bx = 10 + double(cols) * panel_w + 10, by = head_h + pad_top, bh = std::max(map_h, 120.0);
    for (int k = 0; k < 100; ++k) {
        set_colour(cr, viridis((k + 0.5) / 100));
        cairo_rectangle(cr, bx, by + bh - (k + 1) * bh / 100, 16, bh / 100 + 0.5);
        cairo_fill(cr);
    }
    for (double t : {0.0, 0.5, 1.0}) cv.text(tick_label(m.low + t * (m.high - m.low)), bx + 22, by + bh - t * bh, 11, 0, 0.5);
    cv.text(m.scale, bx + 8, by - 12, 12);
    return cv.png("attention picture");
}

void write_png(const std::filesystem::path& path, const std::vector<unsigned char>& png) {
    io::write_file_atomic(path, png.data(), png.size());
}

}  // namespace xgrad::cli
