#include "core/plan/ns_variant.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace mfsdp {
namespace {

using NI = NsIndexing;
using NN = NsNormalisation;
using NS = NsSpelling;

// Every coefficient as its source writes it (or, where the source divides a raw table by a safety
// factor, the double its own Python evaluates: regression/optim_parity/check_ns.py recomputes both).
std::vector<NsVariantInfo> make_variants() {
  const NsTriple jordan{3.4445, -4.7750, 2.0315};
  // The Polar Express paper's Algorithm 1: its raw 8-triple table with a / 1.01, b / 1.01^3, c / 1.01^5
  // on all but the last (evaluated in double as the paper's Python does).
  const std::vector<NsTriple> paper{{8.205160414005574, -22.90193498705605, 16.460724910180314},
                                    {4.066395159942775, -2.8611540867551426, 0.5183995226694741},
                                    {3.9095949044379155, -2.823351735039516, 0.5250369769390025},
                                    {3.2855640171986153, -2.415301959635945, 0.48529406552790866},
                                    {2.277873287083977, -1.619821765265441, 0.39848078704168355},
                                    {1.8725756512746514, -1.2307042574884297, 0.35851616209511666},
                                    {1.856437109755889, -1.2132392819185351, 0.35679978941375945},
                                    {1.875, -1.25, 0.375}};
  std::vector<NsTriple> deepseek(8, jordan);
  deepseek.insert(deepseek.end(), 2, NsTriple{2.0, -1.5, 0.5});
  return {
      {NsVariant::torch, "torch", "torch 2.11.0 torch/optim/_muon.py _zeropower_via_newtonschulz",
       "https://github.com/pytorch/pytorch/blob/v2.11.0/torch/optim/_muon.py", {}, NI::repeat_last, 0,
       NN::clamp_in_dtype, 1.0, -1, NsDtype::bf16, false, NS::addmm, {}, false, false},
      {NsVariant::simple_eo, "simple-eo",
       "NVIDIA-NeMo/Emerging-Optimizers@fd7729267109a8848709e9406bf19e53e970c3f4 "
       "emerging_optimizers/orthogonalized_optimizers/muon_utils.py \"simple\"",
       "https://github.com/NVIDIA-NeMo/Emerging-Optimizers/blob/fd7729267109a8848709e9406bf19e53e970c3f4/"
       "emerging_optimizers/orthogonalized_optimizers/muon_utils.py",
       {jordan}, NI::cycle, 0, NN::clamp_in_fp32, 1.0, 1e-15, NsDtype::bf16, false, NS::addmm, {}, false, true},
      {NsVariant::cubic5_eo, "cubic5-eo",
       "NVIDIA-NeMo/Emerging-Optimizers@fd7729267109a8848709e9406bf19e53e970c3f4 "
       "emerging_optimizers/orthogonalized_optimizers/muon_utils.py \"cubic5\"",
       "https://github.com/NVIDIA-NeMo/Emerging-Optimizers/blob/fd7729267109a8848709e9406bf19e53e970c3f4/"
       "emerging_optimizers/orthogonalized_optimizers/muon_utils.py",
       {{3.3656576, -3.3420992, 0.0},
        {2.5744352, -1.4957376, 0.0},
        {2.5368962, -1.4312570, 0.0},
        {2.4418906, -1.2764040, 0.0},
        {2.2230472, -0.9630650, 0.0}},
       NI::repeat_last, 5, NN::clamp_in_fp32, 1.0, 1e-15, NsDtype::bf16, false, NS::addmm, {}, false, true},
      {NsVariant::polar_express_5, "polar-express-5",
       "KellerJordan/modded-nanogpt@f411b3d346aa52d3504324ca93c230fd84c6c07f train_gpt_medium.py polar_express "
       "(the table nanochat and Dion carry)",
       "https://github.com/KellerJordan/modded-nanogpt/blob/f411b3d346aa52d3504324ca93c230fd84c6c07f/train_gpt_medium.py",
       {{8.156554524902461, -22.48329292557795, 15.878769915207462},
        {4.042929935166739, -2.808917465908714, 0.5000178451051316},
        {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
        {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
        {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}},
       NI::repeat_last, 5, NN::add_in_dtype, 1 + 2e-2, 1e-6, NsDtype::bf16, true, NS::addmm, {}, false, false},
      {NsVariant::polar_express_paper, "polar-express-paper",
       "arXiv 2505.16932 (Amsel, Persson, Musco, Gower: The Polar Express), Algorithm 1", "https://arxiv.org/abs/2505.16932",
       paper, NI::repeat_last, 0, NN::add_in_dtype, 1.01, 1e-7, NsDtype::bf16, false, NS::elementwise, {}, false, false},
      {NsVariant::polar_express_pyopt, "polar-express-pyopt",
       "pytorch-optimizer 4.1.0 pytorch_optimizer/optimizer/utils/matrix.py NS_COEFFICIENTS[\"polar_express\"]",
       "https://pypi.org/project/pytorch-optimizer/4.1.0/",
       {{8.237312490495555, -23.157747414558198, 16.680568411445915},
        {4.082441999064835, -2.893047735332586, 0.5252849256975648},
        {3.9263479922546582, -2.8547468034765298, 0.5318022422894988},
        {3.2982187133085143, -2.424541981026706, 0.48632008358844075},
        {2.2970369434552573, -1.63662558125903, 0.4002628455953627},
        {1.8763805351440397, -1.2347896577722228, 0.35891887501668385},
        {1.8564423485617974, -1.2132449880935525, 0.3568003487825883},
        {1.8749994008682747, -1.2499988017229169, 0.3749994008546422}},
       NI::repeat_last, 0, NN::clamp_in_dtype, 1.0, 1e-7, NsDtype::bf16, true, NS::addmm, {}, false, false},
      {NsVariant::polar_express_safer_pyopt, "polar-express-safer-pyopt",
       "pytorch-optimizer 4.1.0 pytorch_optimizer/optimizer/utils/matrix.py NS_COEFFICIENTS[\"polar_express_safer\"]",
       "https://pypi.org/project/pytorch-optimizer/4.1.0/",
       {{8.156554524902461, -22.48329292557795, 15.878769915207462},
        {4.0429299351667245, -2.808917465908704, 0.5000178451051299},
        {3.8916678022926563, -2.7724841532176825, 0.5060648178503389},
        {3.285753657755658, -2.3681294933425394, 0.46449024233003117},
        {2.3005307116270983, -1.6111665557258408, 0.3833374427545273},
        {1.8631210546382593, -1.2042160621002727, 0.3421879560523383},
        {1.8382572152247512, -1.1779263289537742, 0.3396513038637379},
        {1.8749999923301852, -1.2499999836060613, 0.374999991275876}},
       NI::repeat_last, 0, NN::clamp_in_dtype, 1.0, 1e-7, NsDtype::bf16, true, NS::addmm, {}, false, false},
      {NsVariant::polar_express_eo, "polar-express-eo",
       "NVIDIA-NeMo/Emerging-Optimizers@fd7729267109a8848709e9406bf19e53e970c3f4 "
       "emerging_optimizers/orthogonalized_optimizers/muon_utils.py \"polar_express\"",
       "https://github.com/NVIDIA-NeMo/Emerging-Optimizers/blob/fd7729267109a8848709e9406bf19e53e970c3f4/"
       "emerging_optimizers/orthogonalized_optimizers/muon_utils.py",
       {{8.2051, -22.9019, 16.4607},
        {4.0664, -2.8612, 0.5184},
        {3.9096, -2.8234, 0.5250},
        {3.2856, -2.4153, 0.4853},
        {2.2779, -1.6198, 0.3985},
        {1.8726, -1.2307, 0.3585},
        {1.8564, -1.2132, 0.3568},
        {1.8750, -1.2500, 0.3750}},
       NI::repeat_last, 0, NN::clamp_in_fp32, 1.0, 1e-15, NsDtype::bf16, false, NS::addmm, {}, false, true},
      {NsVariant::aol, "aol",
       "thib-s/flash-newton-schulz@cdb03db0e6c59e82365426373a1601fadfdf7ab3 newton_schulz_triton.py "
       "newton_schulz_triton_aol (Dion's newton_schulz_triton_fast)",
       "https://github.com/thib-s/flash-newton-schulz/blob/cdb03db0e6c59e82365426373a1601fadfdf7ab3/newton_schulz_triton.py",
       {{4.6051, -9.6552, 5.6769}, {4.7505, -6.0861, 2.1790}, {2.7763, -2.3190, 0.5523}, {2.4231, -2.2861, 0.8193}},
       NI::repeat_last, 4, NN::aol, 1.0, 1e-7, NsDtype::bf16, true, NS::addmm, {}, false, false},
      {NsVariant::deepseek_v4, "deepseek-v4",
       "DeepSeek-V4 report (8 steps of (3.4445, -4.7750, 2.0315), then 2 of (2, -1.5, 0.5)), as "
       "NVIDIA-NeMo/Emerging-Optimizers@fd7729267109a8848709e9406bf19e53e970c3f4 \"deepseekv4\" runs it",
       "https://huggingface.co/deepseek-ai/DeepSeek-V4-Pro/resolve/main/DeepSeek_V4.pdf", deepseek, NI::repeat_last, 10,
       NN::clamp_in_fp32, 1.0, 1e-15, NsDtype::bf16, false, NS::addmm, {}, false, true},
      {NsVariant::gram_pyopt, "gram-pyopt",
       "pytorch-optimizer 4.1.0 pytorch_optimizer/optimizer/utils/matrix.py zero_power_via_gram_newton_schulz "
       "(Muon's defaults: weights \"original\", reset_steps (2,))",
       "https://pypi.org/project/pytorch-optimizer/4.1.0/", {jordan}, NI::repeat_last, 0, NN::clamp_in_fp32, 1.0, 1e-7,
       NsDtype::fp16, true, NS::gram, {2}, false, false},
      {NsVariant::gram_dao, "gram-dao",
       "Dao-AILab/gram-newton-schulz@f08f25e1b24112ec28a12001e67cd4fc4615dfe7 gram_newton_schulz/gram_newton_schulz.py "
       "GramNewtonSchulz (coefficients.py POLAR_EXPRESS_COEFFICIENTS, reset [2])",
       "https://github.com/Dao-AILab/gram-newton-schulz/blob/f08f25e1b24112ec28a12001e67cd4fc4615dfe7/gram_newton_schulz/",
       {{7.892582874424408, -20.38301394587957, 13.555306149406924},
        {3.911484868135431, -2.5464635929060884, 0.4268988319673074},
        {3.760657955697423, -2.512819018216563, 0.4323647349070073},
        {3.160399673686287, -2.149649518898498, 0.3996366907664389},
        {2.1910971618617303, -1.441662010214663, 0.328146487623155}},
       NI::repeat_last, 5, NN::add_in_fp32, 1.0, 1e-7, NsDtype::fp16, false, NS::gram, {2}, true, false},
      // heavyball rounds its normalised input to bf16 stochastically (another rounding each run);
      // here it is rounded to nearest, the one deterministic choice (docs/optimizers.md). It
      // normalises before transposing a tall matrix (a view), which gives the same bits: the norm
      // reduces in memory order either way (regression/optim_parity/check_ns.py compares outputs).
      {NsVariant::heavyball, "heavyball", "heavyball 3.2.1 heavyball/utils.py zeropower_via_newtonschulz5",
       "https://pypi.org/project/heavyball/3.2.1/",
       {{4.0848, -6.8946, 2.9270},
        {3.9505, -6.3029, 2.6377},
        {3.7418, -5.5913, 2.3037},
        {2.8769, -3.1427, 1.2046},
        {2.8366, -3.0525, 1.2012}},
       NI::repeat_last, 5, NN::clamp_in_fp32, 1.0, 1e-7, NsDtype::bf16, false, NS::horner, {}, false, false},
  };
}

}  // namespace

const std::vector<NsVariantInfo>& ns_variants() {
  static const std::vector<NsVariantInfo> all = make_variants();
  return all;
}

const NsVariantInfo& ns_variant_info(NsVariant v) {
  for (const NsVariantInfo& i : ns_variants())
    if (i.id == v) return i;
  TORCH_INTERNAL_ASSERT(false, "an NsVariant has no entry in ns_variants()");
}

const char* to_string(NsVariant v) { return ns_variant_info(v).name; }

std::string ns_variant_names() {
  std::string out;
  for (const NsVariantInfo& i : ns_variants()) out += (out.empty() ? "" : ", ") + std::string(i.name);
  return out;
}

NsVariant ns_variant_from_string(const std::string& name) {
  for (const NsVariantInfo& i : ns_variants())
    if (name == i.name) return i.id;
  TORCH_CHECK(false, "unknown Newton-Schulz variant '", name, "' (expected one of ", ns_variant_names(), ")");
}

NsTriple ns_coefficients(const NsVariantInfo& v, int i, NsTriple torch_triple) {
  TORCH_CHECK(i >= 0, "ns_coefficients: step ", i, " is negative");
  if (v.table.empty()) return torch_triple;
  const size_t n = v.table.size(), k = static_cast<size_t>(i);
  return v.table[v.indexing == NsIndexing::cycle ? k % n : std::min(k, n - 1)];
}

double ns_multiply_adds(const NsVariantInfo& v, int steps, int64_t rows, int64_t cols) {
  const double s = static_cast<double>(std::min(rows, cols)), l = static_cast<double>(std::max(rows, cols));
  if (steps <= 0) return 0;
  const bool gram = v.spelling == NsSpelling::gram && !(v.square_fallback && rows == cols);
  if (!gram) {
    // AOL computes step 0's A before the rescale and reuses it: the same products. A cubic step
    // (c = 0, where the source skips A^2) costs s^2 l twice.
    double cost = 0;
    for (int i = 0; i < steps; ++i) {
      const bool cubic = v.cubic_when_c_is_zero && ns_coefficients(v, i, NsTriple{1, 0, 1}).c == 0;
      cost += cubic ? 2 * s * s * l : s * s * (2 * l + s);
    }
    return cost;
  }
  double cost = s * s * l;  // R = X X^T
  bool have_q = false;
  for (int i = 0; i < steps; ++i) {
    const bool restart = std::find(v.reset_steps.begin(), v.reset_steps.end(), i) != v.reset_steps.end();
    if (restart && have_q) cost += 2 * s * s * l, have_q = false;  // X <- Q X, R <- X X^T
    cost += s * s * s;                                              // R R (the polynomial)
    if (have_q) cost += s * s * s;                                  // Q <- a Q + Q Z
    const bool next_restart = std::find(v.reset_steps.begin(), v.reset_steps.end(), i + 1) != v.reset_steps.end();
    if (i + 1 < steps && !next_restart) cost += 2 * s * s * s;      // R <- Q R Q in two products
    have_q = true;
  }
  return cost + s * s * l;  // X <- Q X
}

}  // namespace mfsdp
