// The conformance interface (docs/conformance.md): trajectory dumps written as a run goes and
// compared by `mfsdp conform` (harness/conform.h). Synthetic dumps pin the comparison (equal, a
// planted one-ULP difference, a tolerance file's entries, headers that disagree, every kind of bad
// input); real runs pin the dump (the oracle and the owner runtime dump bit-identical trajectories,
// gradients included, and an interrupted dump says it is incomplete).
#include "core/io/safetensors.h"
#include "core/util/files.h"
#include "harness/conform.h"
#include "harness/placements.h"
#include "harness/trajectory_dump.h"
#include "testing/fixtures.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

namespace mfsdp {
namespace {

nlohmann::json synthetic_header() {
  return {{"format", kTrajectoryFormat}, {"format_version", kTrajectoryFormatVersion}, {"producer", "test"},
          {"model", {{"name", "toy"}}},  {"optimizer", {{"matrix", "muon"}}},            {"world_size", 2},
          {"mesh", mesh_json(1, 2, "replicated")},                 {"precision", {{"param_dtype", "fp32"}}}, {"seed", 0}, {"data", {{"batch", 1}}}, {"max_norm", 0.0},
          {"lr_schedule", {{"kind", "constant"}}}};
}

ParamMap toy_params(int64_t step) {
  return {{"a.weight", at::arange(12, at::kFloat).reshape({3, 4}).mul(0.1 * (step + 1))},
          {"b.weight", at::full({5}, 0.5 + step, at::kFloat)}};
}

// A dump of `steps` steps; `edit` may change a step's state before it is written.
void write_dump(const std::string& dir, int steps, bool grads = false,
                const std::function<void(int64_t, TrajectoryStep&, ParamMap&)>& edit = {},
                const nlohmann::json& header = synthetic_header(), bool finish = true,
                const std::function<void(int64_t, ParamMap&)>& state = {}) {
  TrajectoryWriter w(dir, header);
  for (int64_t s = 0; s <= steps; ++s) {
    TrajectoryStep t;
    t.step = s;
    if (s > 0) t.loss = 5.0 - 0.25 * static_cast<double>(s);
    ParamMap p = toy_params(s);
    if (edit) edit(s, t, p);
    const ParamMap g = toy_params(s + 10);
    ParamMap st;
    if (state) state(s, st);
    w.add(t, p, grads && s > 0 ? &g : nullptr, state ? &st : nullptr);
  }
  if (finish) w.finish();
}

float next_after(float v) { return std::nextafter(v, INFINITY); }

ConformReport compare_dirs(const std::string& a, const std::string& b, const std::string& tolerance = "exact") {
  return conform(read_trajectory(a), read_trajectory(b), parse_tolerance(tolerance));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(Conform, EqualDumpsAreBitwiseEqual) {
  TempDir d("conform_equal");
  write_dump(d.path() + "/a", 3, true);
  write_dump(d.path() + "/b", 3, true);
  const ConformReport r = compare_dirs(d.path() + "/a", d.path() + "/b");
  EXPECT_TRUE(r.equal());
  EXPECT_TRUE(r.within());
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.values, 2 + 3 * (1 + 2 + 2));  // step 0: 2 tensors; steps 1..3: loss, 2 params, 2 grads
  EXPECT_NE(report_text(r, parse_tolerance("exact")).find("BITWISE EQUAL"), std::string::npos);
}

// One element of one tensor one ULP away at step 2: exact fails there and names it; a tolerance
// entry of one ULP covers it and is named; an entry that does not apply to parameters does not.
TEST(Conform, AOneUlpDifferenceIsFoundAndOnlyAnApplicableEntryCoversIt) {
  TempDir d("conform_ulp");
  write_dump(d.path() + "/ref", 3);
  write_dump(d.path() + "/cand", 3, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s != 2) return;
    float* x = p.at("a.weight").data_ptr<float>();
    x[7] = next_after(x[7]);
  });
  const ConformReport exact = compare_dirs(d.path() + "/ref", d.path() + "/cand");
  ASSERT_FALSE(exact.equal());
  EXPECT_FALSE(exact.within());
  EXPECT_EQ(exact.first_difference->step, 2);
  EXPECT_EQ(exact.first_difference->kind, "params");
  EXPECT_EQ(exact.first_difference->name, "a.weight");
  EXPECT_EQ(exact.first_difference->mismatches, 1);
  EXPECT_EQ(exact.first_difference->first_mismatch, 7);
  EXPECT_EQ(exact.first_difference->max_ulp, 1u);
  EXPECT_EQ(exact.steps[2].differing, 1);
  EXPECT_EQ(exact.steps[3].differing, 0);  // each step's file stands alone

  const std::string file = d.path() + "/tol.json";
  write_file_atomic(file, R"({"entries": [
      {"name": "grads-only", "reason": "excuses gradients only", "what": ["grads"], "max_ulp": 100},
      {"name": "b-only", "reason": "excuses b.weight only", "tensors": "b\\..*", "max_ulp": 100},
      {"name": "one-ulp", "reason": "a one-ULP reordering", "what": ["params"], "max_ulp": 1}]})");
  const ConformReport tol = compare_dirs(d.path() + "/ref", d.path() + "/cand", file);
  EXPECT_FALSE(tol.equal());
  EXPECT_TRUE(tol.within());
  EXPECT_EQ(tol.first_difference->entry, "one-ulp");
  EXPECT_EQ(tol.entry_uses.at("one-ulp"), 1);
  EXPECT_EQ(tol.entry_uses.count("grads-only"), 0u);
  EXPECT_NE(report_text(tol, parse_tolerance(file)).find("one-ulp: 1 value(s); a one-ULP reordering"), std::string::npos);

  // rtol/atol: 1 ULP of 0.7 * 3 (a.weight[7] at step 2) is 2.4e-7 absolute.
  EXPECT_TRUE(compare_dirs(d.path() + "/ref", d.path() + "/cand", "atol=1e-6").within());
  EXPECT_FALSE(compare_dirs(d.path() + "/ref", d.path() + "/cand", "atol=1e-8").within());
  EXPECT_TRUE(compare_dirs(d.path() + "/ref", d.path() + "/cand", "rtol=1e-6").within());
  EXPECT_FALSE(compare_dirs(d.path() + "/ref", d.path() + "/cand", "rtol=1e-9,atol=1e-9").within());
}

TEST(Conform, LossesCompareInDoubleUlps) {
  TempDir d("conform_loss");
  write_dump(d.path() + "/ref", 2);
  write_dump(d.path() + "/cand", 2, false, [](int64_t s, TrajectoryStep& t, ParamMap&) {
    if (s == 1) t.loss = std::nextafter(*t.loss, 0.0);
  });
  const ConformReport r = compare_dirs(d.path() + "/ref", d.path() + "/cand");
  ASSERT_FALSE(r.equal());
  EXPECT_EQ(r.first_difference->what(), "step 1 loss");
  EXPECT_EQ(r.first_difference->max_ulp, 1u);
}

// A NaN where the reference has a number is a difference no tolerance excuses; NaN in both with
// the same bits is equal (bits are what the contract compares). A bare NaN token in the JSON is
// bad input naming the spelling the format uses.
TEST(Conform, NonFiniteValuesAreNeverWithinATolerance) {
  TempDir d("conform_nan");
  write_dump(d.path() + "/ref", 2);
  write_dump(d.path() + "/cand", 2, false, [](int64_t s, TrajectoryStep& t, ParamMap& p) {
    if (s == 2) p.at("b.weight").data_ptr<float>()[3] = NAN;
    if (s == 2) t.loss = NAN;
  });
  const ConformReport r = compare_dirs(d.path() + "/ref", d.path() + "/cand", "rtol=1e30,atol=1e30");
  EXPECT_FALSE(r.within());
  EXPECT_EQ(r.first_outside->what(), "step 2 loss");
  EXPECT_TRUE(std::isinf(r.first_outside->max_abs));
  EXPECT_TRUE(compare_dirs(d.path() + "/cand", d.path() + "/cand").equal());

  nlohmann::json h = nlohmann::json::parse(read_file(d.path() + "/cand/trajectory.json"));
  EXPECT_EQ(h["steps"][2]["loss"], "nan");
  std::string text = read_file(d.path() + "/cand/trajectory.json");
  text.replace(text.find("\"nan\""), 5, "NaN");
  write_file_atomic(d.path() + "/cand/trajectory.json", text);
  EXPECT_NE(error_of([&] { read_trajectory(d.path() + "/cand"); }).find("NaN and Infinity are not JSON"), std::string::npos);
}

TEST(Conform, HeadersThatDisagreeNameTheField) {
  TempDir d("conform_header");
  write_dump(d.path() + "/ref", 2);
  nlohmann::json h = synthetic_header();
  h["optimizer"]["muon"] = {{"momentum", 0.9}};
  write_dump(d.path() + "/cand", 2, false, {}, h);
  const std::string diff = header_difference(read_trajectory(d.path() + "/ref"), read_trajectory(d.path() + "/cand"));
  EXPECT_EQ(diff, "optimizer.muon: reference has none, candidate {\"momentum\":0.9}");
  EXPECT_NE(error_of([&] { compare_dirs(d.path() + "/ref", d.path() + "/cand"); }).find("the headers disagree"), std::string::npos);

  h = synthetic_header();
  h["world_size"] = 4;
  h["mesh"] = mesh_json(1, 4, "replicated");
  write_dump(d.path() + "/w4", 2, false, {}, h);
  EXPECT_EQ(header_difference(read_trajectory(d.path() + "/ref"), read_trajectory(d.path() + "/w4")),
            "world_size: reference 2, candidate 4");
  write_dump(d.path() + "/short", 1);
  EXPECT_EQ(header_difference(read_trajectory(d.path() + "/ref"), read_trajectory(d.path() + "/short")),
            "steps: the reference lists steps 0..2, the candidate 0..1");
  // Numbers compare by value: 2 and 2.0 agree.
  h = synthetic_header();
  h["world_size"] = 2.0;
  write_dump(d.path() + "/float", 2, false, {}, h);
  EXPECT_EQ(header_difference(read_trajectory(d.path() + "/ref"), read_trajectory(d.path() + "/float")), "");
}

// Each header field a run is judged by is compared by name (the list is spelled out here, not
// read from kComparedFields, so a field dropped from that list fails): runs under different
// schedules, seeds, clipping thresholds... are not comparable.
TEST(Conform, EveryComparedHeaderFieldIsCompared) {
  TempDir d("conform_fields");
  write_dump(d.path() + "/ref", 1);
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"model", {{"name", "other"}}},          {"optimizer", {{"matrix", "adamw"}}}, {"world_size", 3},
      {"precision", {{"param_dtype", "bf16"}}}, {"seed", 1},                        {"data", {{"batch", 2}}},
      {"max_norm", 1.0},                        {"lr_schedule", {{"kind", "wsd"}}}};
  for (const auto& [field, value] : edits) {
    nlohmann::json h = synthetic_header();
    h[field] = value;
    if (field == "world_size") h["mesh"] = mesh_json(1, 3, "replicated");
    const std::string dir = d.path() + "/" + field;
    write_dump(dir, 1, false, {}, h);
    EXPECT_EQ(header_difference(read_trajectory(d.path() + "/ref"), read_trajectory(dir)).rfind(field, 0), 0u) << field;
  }
}

// ULPs are counted on the sign-aware line: +x and -x are about 2^31 apart, never within a small
// max_ulp; +0 and -0 are 1 apart. Where several entries cover a value, the first is named.
TEST(Conform, UlpsCrossZeroAndTheFirstCoveringEntryIsNamed) {
  TempDir d("conform_sign");
  write_dump(d.path() + "/ref", 1);
  write_dump(d.path() + "/flip", 1, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s == 1) p.at("a.weight").data_ptr<float>()[3] *= -1;
  });
  const std::string file = d.path() + "/tol.json";
  write_file_atomic(file, R"({"entries": [
      {"name": "wide", "reason": "the first entry", "max_ulp": 1000},
      {"name": "wider", "reason": "the second, covering too", "max_ulp": 100000}]})");
  const ConformReport flip = compare_dirs(d.path() + "/ref", d.path() + "/flip", file);
  ASSERT_TRUE(flip.first_difference);
  EXPECT_GT(flip.first_difference->max_ulp, uint64_t{1} << 30);
  EXPECT_FALSE(flip.within());

  write_dump(d.path() + "/zero", 1, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s != 1) return;
    p.at("a.weight").data_ptr<float>()[0] = -0.0f;  // the reference's element 0 is +0
    p.at("a.weight").data_ptr<float>()[5] = next_after(next_after(p.at("a.weight").data_ptr<float>()[5]));
  });
  const ConformReport zero = compare_dirs(d.path() + "/ref", d.path() + "/zero", file);
  ASSERT_TRUE(zero.first_difference);
  EXPECT_EQ(zero.first_difference->max_ulp, 2u);
  EXPECT_TRUE(zero.within());
  EXPECT_EQ(zero.first_difference->entry, "wide");
  EXPECT_EQ(zero.entry_uses.count("wider"), 0u);
}

// A tolerance's `tensors` pattern is matched by RE2, in time linear in the name: patterns that
// backtrack exponentially (or recurse per character) in std::regex return at once, and a tensor
// name longer than the reader's limit is refused naming its length.
TEST(Conform, TensorPatternsMatchInLinearTimeAndLongNamesAreRefused) {
  TempDir d("conform_regex");
  auto with = [](const std::string& name, bool differ) {
    return [name, differ](int64_t s, TrajectoryStep&, ParamMap& p) {
      p[name] = at::full({4}, 1.0f + static_cast<float>(s));
      if (differ && s == 1) p[name].data_ptr<float>()[2] = next_after(p[name].data_ptr<float>()[2]);
    };
  };
  const std::string evil = std::string(34, 'a') + "b";  // (a+)+$ backtracks 2^34 ways before failing
  const std::string long_name = std::string(1000, 'a');
  for (const auto& [name, pattern, covered] :
       {std::tuple{evil, std::string("(a+)+$"), false}, std::tuple{long_name, std::string("(a|b)*"), true},
        std::tuple{long_name, std::string(".*"), true}}) {
    write_dump(d.path() + "/ref", 1, false, with(name, false));
    write_dump(d.path() + "/cand", 1, false, with(name, true));
    const std::string file = d.path() + "/tol.json";
    write_file_atomic(file, nlohmann::json{{"entries", {{{"name", "p"}, {"reason", "r"}, {"tensors", pattern}, {"max_ulp", 1}}}}}.dump());
    const auto t0 = std::chrono::steady_clock::now();
    const ConformReport r = compare_dirs(d.path() + "/ref", d.path() + "/cand", file);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0) << pattern;
    EXPECT_EQ(r.within(), covered) << pattern;
    std::filesystem::remove_all(d.path() + "/ref");
    std::filesystem::remove_all(d.path() + "/cand");
  }
  write_dump(d.path() + "/huge", 1, false, with(std::string(300000, 'a'), false));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(error_of([&] { read_trajectory(d.path() + "/huge"); compare_dirs(d.path() + "/huge", d.path() + "/huge"); })
                .find("a tensor name of 300000 bytes (at most 1024)"),
            std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// Every kind of broken dump is refused with a message naming the dump, the step and what is wrong.
TEST(Conform, BadDumpsAreRefusedNamingWhatIsWrong) {
  TempDir d("conform_bad");
  const std::string ref = d.path() + "/ref";
  write_dump(ref, 3);
  auto copy = [&](const std::string& name) {
    const std::string to = d.path() + "/" + name;
    make_dirs(to);
    for (const char* f : {"trajectory.json", "params_00000000.safetensors", "params_00000001.safetensors",
                          "params_00000002.safetensors", "params_00000003.safetensors"})
      write_file_atomic(to + "/" + f, read_file(ref + "/" + f));
    return to;
  };
  auto expect_error = [&](const std::string& dir, const std::string& needle) {
    const std::string e = error_of([&] { compare_dirs(ref, dir); });
    EXPECT_NE(e.find(needle), std::string::npos) << "got: " << e;
  };
  // A step's file removed.
  std::string bad = copy("missing_file");
  ASSERT_EQ(std::remove((bad + "/params_00000002.safetensors").c_str()), 0);
  expect_error(bad, "step 2: its file 'params_00000002.safetensors' is missing from the dump");
  // A step missing from the list.
  bad = copy("missing_step");
  nlohmann::json h = nlohmann::json::parse(read_file(bad + "/trajectory.json"));
  h["steps"].erase(2);
  write_file_atomic(bad + "/trajectory.json", h.dump());
  expect_error(bad, "step 2 is missing");
  // A truncated tensor file.
  bad = copy("truncated");
  const std::string text = read_file(bad + "/params_00000001.safetensors");
  write_file_atomic(bad + "/params_00000001.safetensors", text.substr(0, text.size() - 9));
  expect_error(bad, "params_00000001.safetensors");
  // A tensor missing, one renamed, one of another shape.
  bad = d.path() + "/missing_tensor";
  write_dump(bad, 3, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s == 1) p.erase("b.weight");
  });
  expect_error(bad, "tensor 'b.weight' of " + ref + "/params_00000001.safetensors is missing from");
  bad = d.path() + "/extra_tensor";
  write_dump(bad, 3, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s == 3) p.emplace("c.weight", at::full({2}, 1.0, at::kFloat));
  });
  expect_error(bad, "tensor 'c.weight' of");
  bad = d.path() + "/shape";
  write_dump(bad, 3, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s == 2) p["a.weight"] = p["a.weight"].reshape({4, 3}).contiguous();
  });
  expect_error(bad, "tensor 'a.weight' has shape [3, 4] in");
  bad = d.path() + "/dtype";
  write_dump(bad, 3, false, [](int64_t s, TrajectoryStep&, ParamMap& p) {
    if (s == 2) p["a.weight"] = p["a.weight"].to(at::kDouble);
  });
  expect_error(bad, "tensor 'a.weight' is F32 in");
  // An interrupted run, another format, not a dump at all, a loss only one side has.
  bad = d.path() + "/incomplete";
  write_dump(bad, 3, false, {}, synthetic_header(), /*finish=*/false);
  expect_error(bad, "the dump is incomplete (its run stopped after step 3");
  bad = copy("format");
  h = nlohmann::json::parse(read_file(bad + "/trajectory.json"));
  h["format_version"] = 99;
  write_file_atomic(bad + "/trajectory.json", h.dump());
  expect_error(bad, "format_version 99 is not 1 or 2");
  expect_error(d.path(), "holds no trajectory.json: not a trajectory dump");
  expect_error(d.path() + "/nowhere", "is not a directory");
  bad = copy("loss");
  h = nlohmann::json::parse(read_file(bad + "/trajectory.json"));
  h["steps"][1].erase("loss");
  write_file_atomic(bad + "/trajectory.json", h.dump());
  expect_error(bad, "step 1: only the reference records a loss");
  bad = copy("escape");
  h = nlohmann::json::parse(read_file(bad + "/trajectory.json"));
  h["steps"][1]["params"] = "../ref/params_00000001.safetensors";
  write_file_atomic(bad + "/trajectory.json", h.dump());
  expect_error(bad, "is not a plain name inside the dump");
}

// Format 2: optimizer state is compared where both dumps have it (a one-ULP slip in a momentum
// buffer is named as state), the mesh is a compared header field (a DDP dump against an HSDP one is
// refused naming it), and a format-1 dump still conforms, with a note that no mesh was compared.
TEST(Conform, FormatTwoComparesStateAndMeshAndStillReadsFormatOne) {
  TempDir d("conform_v2");
  auto momentum = [](int64_t s, ParamMap& st) {
    if (s == 0) return;
    st.emplace("a.weight.momentum_buffer", at::arange(12, at::kFloat).reshape({3, 4}).mul(0.01 * s));
    st.emplace("a.weight.step", at::scalar_tensor(static_cast<double>(s), at::kFloat));
  };
  write_dump(d.path() + "/ref", 3, true, {}, synthetic_header(), true, momentum);
  write_dump(d.path() + "/same", 3, true, {}, synthetic_header(), true, momentum);
  const ConformReport same = compare_dirs(d.path() + "/ref", d.path() + "/same");
  EXPECT_TRUE(same.equal());
  EXPECT_EQ(same.values, 2 + 3 * (1 + 2 + 2 + 2));  // steps 1..3 add two state tensors
  EXPECT_TRUE(same.notes.empty());

  write_dump(d.path() + "/slip", 3, true, {}, synthetic_header(), true, [&](int64_t s, ParamMap& st) {
    momentum(s, st);
    if (s == 2) st.at("a.weight.momentum_buffer").data_ptr<float>()[5] = next_after(st.at("a.weight.momentum_buffer").data_ptr<float>()[5]);
  });
  const ConformReport slip = compare_dirs(d.path() + "/ref", d.path() + "/slip");
  ASSERT_FALSE(slip.equal());
  EXPECT_EQ(slip.first_difference->what(), "step 2 state a.weight.momentum_buffer");
  EXPECT_EQ(slip.first_difference->first_mismatch, 5);

  // Another implementation may keep other state: what only one side keeps is listed, not compared.
  write_dump(d.path() + "/other", 3, true, {}, synthetic_header(), true, [&](int64_t s, ParamMap& st) {
    momentum(s, st);
    if (s > 0) st.erase("a.weight.step"), st.emplace("a.weight.exp_avg_sq", at::ones({3, 4}, at::kFloat));
  });
  const ConformReport other = compare_dirs(d.path() + "/ref", d.path() + "/other");
  EXPECT_TRUE(other.equal());
  EXPECT_EQ(other.steps[2].state_note,
            "state only the reference keeps, not compared: a.weight.step; state only the candidate keeps, not compared: "
            "a.weight.exp_avg_sq");

  write_dump(d.path() + "/stateless", 3, true);
  const ConformReport stateless = compare_dirs(d.path() + "/ref", d.path() + "/stateless");
  EXPECT_TRUE(stateless.equal());
  EXPECT_EQ(stateless.steps[1].state_note, "optimizer state not compared: only the reference has it");

  nlohmann::json h = synthetic_header();
  h["mesh"] = mesh_json(2, 2, "dedup");
  write_dump(d.path() + "/hsdp", 3, true, {}, h);
  EXPECT_EQ(header_difference(read_trajectory(d.path() + "/stateless"), read_trajectory(d.path() + "/hsdp")),
            "mesh.replicas: reference 1, candidate 2 (the gradient sums are grouped differently: the runs are not comparable)");
  EXPECT_NE(error_of([&] { compare_dirs(d.path() + "/stateless", d.path() + "/hsdp"); }).find("the headers disagree: mesh.replicas"),
            std::string::npos);
  h["mesh"]["replicas"] = 3;
  write_dump(d.path() + "/badmesh", 1, false, {}, h);
  EXPECT_NE(error_of([&] { read_trajectory(d.path() + "/badmesh"); }).find("mesh.replicas x mesh.shard_group = 3 is not world_size 2"),
            std::string::npos);
  h.erase("mesh");
  write_dump(d.path() + "/nomesh", 1, false, {}, h);
  EXPECT_NE(error_of([&] { read_trajectory(d.path() + "/nomesh"); }).find("a format-2 header needs the field 'mesh'"),
            std::string::npos);

  h["format_version"] = 1;
  write_dump(d.path() + "/v1", 3, true, {}, h);
  const ConformReport v1 = compare_dirs(d.path() + "/v1", d.path() + "/stateless");
  EXPECT_TRUE(v1.equal());
  ASSERT_EQ(v1.notes.size(), 1u);
  EXPECT_EQ(v1.notes[0], "mesh not compared: the reference is a format-1 dump, which records none");
  write_dump(d.path() + "/v1state", 2, false, {}, h, true, momentum);
  EXPECT_NE(error_of([&] { read_trajectory(d.path() + "/v1state"); }).find("'state' is a format-2 field"), std::string::npos);
}

TEST(Conform, BadTolerancesAreRefused) {
  TempDir d("conform_tol");
  auto err = [](const std::string& spec) { return error_of([&] { parse_tolerance(spec); }); };
  EXPECT_NE(err("rtol=abc").find("'abc' is not a finite number >= 0"), std::string::npos);
  EXPECT_NE(err("rtol=-1").find("is not a finite number >= 0"), std::string::npos);
  EXPECT_NE(err("rtol=1,rtol=2").find("rtol is given twice"), std::string::npos);
  EXPECT_NE(err("rtol=1,ulp=2").find("'ulp=2' in 'rtol=1,ulp=2' is not rtol=R or atol=A"), std::string::npos);
  EXPECT_NE(err(d.path() + "/absent.json").find("is not 'exact', 'rtol=R,atol=A' or an existing JSON file"), std::string::npos);
  auto file = [&](const std::string& text) {
    write_file_atomic(d.path() + "/t.json", text);
    return err(d.path() + "/t.json");
  };
  EXPECT_NE(file("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(file(R"({"entries": []})").find("at least one entry"), std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "max_ulp": 1}]})").find("needs a non-empty string 'reason'"), std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "reason": "r"}]})").find("gives no bound"), std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "reason": "r", "max_ulp": -1}]})").find("'max_ulp' is not an integer >= 0"),
            std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "reason": "r", "max_ulp": 1, "what": ["weights"]}]})").find("expected loss, grad_norm"),
            std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "reason": "r", "max_ulp": 1, "tensors": "("}]})").find("not a regular expression"),
            std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "reason": "r", "max_ulp": 1, "ulps": 2}]})").find("unknown field 'ulps'"),
            std::string::npos);
  EXPECT_NE(file(R"({"entries": [{"name": "x", "reason": "r", "max_ulp": 1}, {"name": "x", "reason": "r", "atol": 1}]})")
                .find("entry name 'x' is used twice"),
            std::string::npos);
}

// Real runs: the oracle and the owner runtime (HSDP replicated included) dump bit-identical
// trajectories, gradients included, from the state before step 1; the dump refuses a directory
// that holds anything.
struct DumpCase {
  std::string placement;
  int world_size;
  int replicas;
  int grad_accum;
  double max_norm;
};

void dump_run(const std::string& dir, const DumpCase& c, const std::string& placement) {
  const int world_size = c.world_size;
  TrainConfig config;
  config.steps = 3;
  config.grad_accum = c.grad_accum;
  config.batch = c.grad_accum > 1 ? 2 : 4;
  config.runtime.max_norm = c.max_norm;
  apply_placement(placement_from_string(placement), config);
  if (c.replicas > 1) config.runtime.replicas = c.replicas;
  RanksOptions ranks;
  ranks.world_size = world_size;
  run_ranks_as_threads(ranks, [&](RankContext& ctx) {
    TrainConfig mine = config;
    const std::unique_ptr<TrajectoryWriter> w = attach_trajectory_dump(ctx, mine, dir, /*grads=*/true, placement);
    train_placement(ctx, mine, {});
    if (w) w->finish();
  });
}

TEST(ConformDump, TheOracleAndTheOwnerRuntimeDumpBitIdenticalTrajectories) {
  TempDir d("conform_dump");
  for (const DumpCase& c : {DumpCase{"owner", 3, 1, 1, 0.0}, DumpCase{"owner", 3, 1, 2, 0.5}, DumpCase{"alltoall", 3, 1, 1, 0.0},
                            DumpCase{"owner", 4, 2, 1, 0.5}}) {
    const std::string tag = c.placement + "_W" + std::to_string(c.world_size) + "_R" + std::to_string(c.replicas) + "_K" +
                            std::to_string(c.grad_accum);
    SCOPED_TRACE(tag);
    dump_run(d.path() + "/oracle_" + tag, c, "ddp");
    dump_run(d.path() + "/" + tag, c, c.placement);
    const ConformReport r = compare_dirs(d.path() + "/oracle_" + tag, d.path() + "/" + tag);
    EXPECT_TRUE(r.equal()) << report_text(r, parse_tolerance("exact"));
    ASSERT_EQ(r.steps.size(), 4u);
    EXPECT_TRUE(r.steps[1].grads_note.empty());
    const TrajectoryDump dump = read_trajectory(d.path() + "/" + tag);
    EXPECT_EQ(dump.steps[0].step, 0);
    EXPECT_FALSE(dump.steps[0].loss.has_value());
    EXPECT_FALSE(dump.steps[1].grads.empty());
    EXPECT_EQ(dump.steps[1].grad_norm.has_value(), c.max_norm > 0);
  }
  EXPECT_NE(error_of([&] { TrajectoryWriter w(d.path(), synthetic_header()); }).find("is not empty"), std::string::npos);
}

}  // namespace
}  // namespace mfsdp
