// `xgrad explore`'s page (study/explore.hpp): page.html with page.css, data.js, patch.js and page.js
// (src/study/explore_page/, compiled into the tool by embed.sh) and the data as JSON, in one file.
// Arrays travel as base64 of the model's own floats (float32 or float64, little-endian), so a
// value on the page is bit for bit the tool's. A map's masked cells are left out (the mask is sent
// once per attention), and so are a loss's trailing rows that are zero in every head (a position's
// loss reaches no later query).
#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "study/explore.hpp"
#include "xgrad/io/file.hpp"

namespace xgrad::cli {
namespace explore_assets {
extern const char* const page_html;
extern const char* const page_css;
extern const char* const data_js;
extern const char* const patch_js;
extern const char* const page_js;
}  // namespace explore_assets

namespace {

std::string base64(const unsigned char* p, std::size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((n + 2) / 3 * 4);
    for (std::size_t i = 0; i < n; i += 3) {
        const unsigned v = unsigned(p[i]) << 16 | (i + 1 < n ? unsigned(p[i + 1]) << 8 : 0u) | (i + 2 < n ? p[i + 2] : 0u);
        out += digits[v >> 18 & 63];
        out += digits[v >> 12 & 63];
        out += i + 1 < n ? digits[v >> 6 & 63] : '=';
        out += i + 2 < n ? digits[v & 63] : '=';
    }
    return out;
}

// The values as the model's floats, base64.
std::string numbers(const std::vector<double>& v, bool is_double) {
    if (is_double) return base64(reinterpret_cast<const unsigned char*>(v.data()), v.size() * sizeof(double));
    std::vector<float> f(v.begin(), v.end());  // exact: they were float32 values
    return base64(reinterpret_cast<const unsigned char*>(f.data()), f.size() * sizeof(float));
}

// The values at the unmasked cells of rows [0, rows) of each head, in (head, row, key) order.
std::vector<double> unmasked(const ExploreSite& s, const std::vector<double>& v, std::size_t rows) {
    std::vector<double> out;
    for (std::size_t h = 0; h < s.heads; ++h)
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < s.keys; ++j) {
                const std::size_t at = (h * s.queries + i) * s.keys + j;
                if (!s.masked[at]) out.push_back(v[at]);
            }
    return out;
}

// 1 + the last query row with a nonzero unmasked value of dP or dS in any head.
std::size_t live_rows(const ExploreSite& s, const ExploreSiteGrads& g) {
    std::size_t rows = 0;
    for (std::size_t h = 0; h < s.heads; ++h)
        for (std::size_t i = rows; i < s.queries; ++i)
            for (std::size_t j = 0; j < s.keys; ++j) {
                const std::size_t at = (h * s.queries + i) * s.keys + j;
                if (!s.masked[at] && (g.dweights[at] != 0 || g.dscores[at] != 0)) {
                    rows = i + 1;
                    break;
                }
            }
    return rows;
}

nlohmann::json report_json(const HeadReport& r) {
    nlohmann::json j{{"layer", r.layer},       {"head", r.head},
                     {"label", r.label},       {"offset", r.scores.offset},
                     {"offset_mass", r.scores.offset_mass}, {"first_token", r.scores.first_token_mass},
                     {"uniformity", r.scores.uniformity}};
    if (r.previous_token) j["previous_token"] = *r.previous_token;
    if (r.induction) j["induction"] = *r.induction;
    if (r.ablation_loss) j["ablation_loss"] = *r.ablation_loss;
    if (r.ablation_accuracy) j["ablation_accuracy"] = *r.ablation_accuracy;
    return j;
}

void replace_once(std::string& s, const std::string& what, const std::string& with) {
    const std::size_t at = s.find(what);
    if (at == std::string::npos) throw value_error("explore: the page template has no " + what);
    s.replace(at, what.size(), with);
}

}  // namespace

std::size_t write_explore_page(const ExploreData& d, const std::filesystem::path& out) {
    const bool is_double = d.dtype == "float64";
    nlohmann::json j{{"title", d.title}, {"description", d.description}, {"dtype", d.dtype},
                     {"loss_input", d.loss_input}, {"heads_note", d.heads_note}};
    j["inputs"] = nlohmann::json::array();
    for (const ExploreInput& in : d.inputs) j["inputs"].push_back({{"name", in.name}, {"tokens", in.tokens}});
    j["sites"] = nlohmann::json::array();
    for (const ExploreSite& s : d.sites) {
        nlohmann::json site{{"name", s.name},     {"heads", s.heads},           {"queries", s.queries},
                            {"keys", s.keys},     {"head_dim", s.head_dim},     {"query_input", s.query_input},
                            {"key_input", s.key_input},
                            {"masked", base64(s.masked.data(), s.masked.size())},
                            {"weights", numbers(unmasked(s, s.weights, s.queries), is_double)}};
        site["head_reports"] = nlohmann::json::array();
        for (const HeadReport& r : s.head_reports) site["head_reports"].push_back(report_json(r));
        j["sites"].push_back(std::move(site));
    }
    j["choices"] = nlohmann::json::array();
    for (const ExploreChoice& c : d.choices) {
        nlohmann::json choice{{"label", c.label}, {"position", c.position}, {"loss", c.loss},
                              {"saliency", nlohmann::json::array()}, {"sites", nlohmann::json::array()}};
        for (const auto& values : c.saliency) choice["saliency"].push_back(numbers(values, is_double));
        for (std::size_t k = 0; k < d.sites.size(); ++k) {
            const ExploreSite& s = d.sites[k];
            const ExploreSiteGrads& g = c.sites.at(k);
            const std::size_t rows = live_rows(s, g);
            nlohmann::json site{{"rows", rows},
                                {"dweights", numbers(unmasked(s, g.dweights, rows), is_double)},
                                {"dscores", numbers(unmasked(s, g.dscores, rows), is_double)},
                                {"dq", numbers(g.dq, is_double)},
                                {"dk", numbers(g.dk, is_double)},
                                {"dv", numbers(g.dv, is_double)}};
            if (!g.head_input.empty()) site["head_input"] = numbers(g.head_input, is_double);
            choice["sites"].push_back(std::move(site));
        }
        j["choices"].push_back(std::move(choice));
    }
    if (d.patching) {  // few numbers: plain JSON (exact for doubles)
        const ExplorePatching& p = *d.patching;
        j["patching"] = {{"metric", p.metric},
                         {"clean_metric", p.clean_metric},
                         {"corrupt_metric", p.corrupt_metric},
                         {"clean_tokens", p.clean_tokens},
                         {"corrupt_tokens", p.corrupt_tokens},
                         {"layers", p.heads.layers},
                         {"heads", p.heads.heads},
                         {"exact", p.heads.exact},
                         {"atp", p.heads.atp},
                         {"pearson", p.heads.pearson},
                         {"spearman", p.heads.spearman},
                         {"lens_clean", p.lens_clean},
                         {"lens_corrupt", p.lens_corrupt}};
    }
    // Token labels may hold bytes that are not UTF-8 (a byte tokenizer): replaced, not thrown on.
    std::string json = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // Inside <script>, "</script" or "<!--" would end or bend the element: every '<' is escaped.
    for (std::size_t at = 0; (at = json.find('<', at)) != std::string::npos;) json.replace(at, 1, "\\u003c");
    std::string page = explore_assets::page_html;
    replace_once(page, "/*XGRAD_CSS*/", explore_assets::page_css);
    replace_once(page, "/*XGRAD_JS*/", std::string(explore_assets::data_js) + explore_assets::patch_js + explore_assets::page_js);
    replace_once(page, "/*XGRAD_DATA*/", json);  // last: the data is the only text not ours
    io::write_file_atomic(out, page.data(), page.size());
    return page.size();
}

}  // namespace xgrad::cli
