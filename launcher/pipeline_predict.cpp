// pipeline_predict: the step time a pipeline run should take, from its own per-stage compute times.
//   pipeline_predict METRICS.jsonl [--warmup N]
// Reads train_gpt's metrics file (log.metrics_file): the start record's schedule, virtual_stages
// and layout.pipeline, and each step record's stage_timing (the step's forward and backward ms per
// virtual stage, summed over its micro_batches), step_ms and phase_ms. Over the steps after the
// first N (default 1), it takes the median of each and prints: per virtual stage the forward and
// backward ms of one micro-batch, the imbalance (slowest stage's forward + backward over the
// mean), and the schedule's time predicted by the bubble formula with balanced stages and by the
// schedule simulator (parallel/pipeline/schedule_sim.h) run with the measured stage times, each
// plus the measured reductions and optimizer phases for the step, against the measured step.
// Bad input prints one line "error: ..." and exits 1.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_sim.h"
#include "launcher/tool_main.h"

namespace trellis {
namespace {

const char* kUsage = "usage: pipeline_predict METRICS.jsonl [--warmup N]\n";

struct Args {
  std::string path;
  int warmup = 1;  // the first step also allocates and tunes: not representative
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg == "--warmup") {
      if (i + 1 >= argc) throw UserError("--warmup needs a value (see --help)");
      const std::string value = argv[++i];
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), a.warmup);
      if (ec != std::errc() || end != value.data() + value.size() || a.warmup < 0)
        throw UserError("--warmup must be an integer >= 0, got \"" + value + "\"");
    } else if (a.path.empty() && !arg.starts_with("--")) {
      a.path = arg;
    } else {
      throw UserError("unexpected argument " + arg + " (see --help)");
    }
  }
  if (a.path.empty()) throw UserError("no metrics file given (see --help)");
  return a;
}

// obj[key] of the record `where`, which must be there and of `kind`.
const JsonValue& member(const JsonValue& obj, std::string_view key, JsonValue::Kind kind, const std::string& where) {
  const JsonValue* v = obj.find(key);
  if (!v || v->kind != kind) throw UserError(where + " has no " + std::string(key) + " of the expected type");
  return *v;
}
double number(const JsonValue& obj, std::string_view key, const std::string& where) {
  return member(obj, key, JsonValue::Kind::kNumber, where).as_double();
}
int positive_int(const JsonValue& obj, std::string_view key, const std::string& where) {
  const double x = number(obj, key, where);
  if (x < 1 || x > 1e9 || x != std::floor(x)) throw UserError(where + ": " + std::string(key) + " is not an integer >= 1");
  return int(x);
}
std::vector<double> numbers(const JsonValue& obj, std::string_view key, size_t n, const std::string& where) {
  const JsonValue& arr = member(obj, key, JsonValue::Kind::kArray, where);
  if (arr.items.size() != n)
    throw UserError(where + ": " + std::string(key) + " has " + std::to_string(arr.items.size()) + " entries, not " +
                    std::to_string(n) + " (pipeline x virtual_stages)");
  std::vector<double> out;
  for (const JsonValue& x : arr.items) {
    if (x.kind != JsonValue::Kind::kNumber) throw UserError(where + ": " + std::string(key) + " holds a non-number");
    out.push_back(x.as_double());
  }
  return out;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

// One timed step: per virtual stage, the step's forward and backward ms; its phases.
struct StepTimes {
  std::vector<double> forward_ms, backward_ms;
  double step_ms, schedule_ms, other_ms;  // other: the reductions and optimizer phases
};

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::error_code ec;
  if (std::filesystem::is_directory(a.path, ec)) throw UserError(a.path + ": is a directory, not a metrics file");
  std::ifstream in(a.path);
  if (!in) throw UserError(a.path + ": cannot open");
  std::string schedule_name;
  int p = 0, v = 0, m = 0;
  std::vector<StepTimes> steps;
  int segment_steps = 0;  // step records since the last start record: each process has its warm-up
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = a.path + ":" + std::to_string(line_no);
    JsonValue rec;
    try {
      rec = parse_json(line, where);
    } catch (const UserError&) {
      if (!in.eof()) throw;  // only the last line, without its newline, can be a killed run's torn write
      std::fprintf(stderr, "note: %s: an incomplete last line (a killed run?) is left out\n", where.c_str());
      break;
    }
    if (const JsonValue* ev = rec.find("event"); ev && ev->kind == JsonValue::Kind::kString && ev->text == "start") {
      const std::string name = member(rec, "schedule", JsonValue::Kind::kString, where).text;
      const int vs = positive_int(rec, "virtual_stages", where);
      const int ps = positive_int(member(rec, "layout", JsonValue::Kind::kObject, where), "pipeline", where + " layout");
      // A resumed run appends to its metrics file: the same layout continues, another cannot mix.
      if (p != 0 && (name != schedule_name || vs != v || ps != p))
        throw UserError(where + ": this start record's schedule " + name + " (pipeline " + std::to_string(ps) +
                        ", virtual stages " + std::to_string(vs) + ") differs from the earlier one's " + schedule_name +
                        " (pipeline " + std::to_string(p) + ", virtual stages " + std::to_string(v) +
                        "): the file holds runs of several layouts");
      schedule_name = name, v = vs, p = ps;
      segment_steps = 0;
      continue;
    }
    if (!rec.find("step") || !rec.find("step_ms") || rec.find("split")) continue;  // not a training step
    if (p == 0) throw UserError(where + ": a step record before the start record");
    if (segment_steps++ < a.warmup) continue;
    const JsonValue& st = member(rec, "stage_timing", JsonValue::Kind::kObject, where);
    const int mb = positive_int(st, "micro_batches", where + " stage_timing");
    if (m != 0 && mb != m) throw UserError(where + ": stage_timing.micro_batches changed from " + std::to_string(m));
    m = mb;
    const JsonValue& ph = member(rec, "phase_ms", JsonValue::Kind::kObject, where);
    StepTimes t;
    t.forward_ms = numbers(st, "forward_ms", size_t(p * v), where + " stage_timing");
    t.backward_ms = numbers(st, "backward_ms", size_t(p * v), where + " stage_timing");
    t.step_ms = number(rec, "step_ms", where);
    t.schedule_ms = number(ph, "schedule", where + " phase_ms");
    t.other_ms = number(ph, "reductions", where + " phase_ms") + number(ph, "optimizer", where + " phase_ms");
    steps.push_back(std::move(t));
  }
  if (p == 0) throw UserError(a.path + ": no start record");
  if (steps.empty())
    throw UserError(a.path + ": no step records after the " + std::to_string(a.warmup) +
                    " warm-up step(s) of each process");
  auto med = [&](auto field) {
    std::vector<double> x;
    for (const StepTimes& t : steps) x.push_back(field(t));
    return median(x);
  };

  // Per virtual stage, one micro-batch: the median over steps of the step's sum, over m.
  const int S = p * v;
  std::vector<double> fwd(static_cast<size_t>(S)), bwd(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    fwd[size_t(s)] = med([&](const StepTimes& t) { return t.forward_ms[size_t(s)]; }) / m;
    bwd[size_t(s)] = med([&](const StepTimes& t) { return t.backward_ms[size_t(s)]; }) / m;
  }
  // Forward + backward of one micro-batch: the mean over virtual stages, and the slowest.
  double total = 0;
  int slowest_stage = 0;
  for (int s = 0; s < S; ++s) {
    total += fwd[size_t(s)] + bwd[size_t(s)];
    if (fwd[size_t(s)] + bwd[size_t(s)] > fwd[size_t(slowest_stage)] + bwd[size_t(slowest_stage)]) slowest_stage = s;
  }
  const double mean = total / S, slowest = fwd[size_t(slowest_stage)] + bwd[size_t(slowest_stage)];

  // Bubble formula: every stage takes the mean, (m v + p - 1) slots of one chunk's forward + backward.
  const double ideal_ms = double(m * v + p - 1) * mean;
  // The schedule simulated with the measured times, in microseconds (at least 1: a stage takes time).
  const ScheduleKind kind = parse_schedule_kind(schedule_name);
  SimCosts costs;
  for (int s = 0; s < S; ++s) {
    costs.stage_forward.push_back(std::max<int64_t>(1, std::llround(fwd[size_t(s)] * 1e3)));
    costs.stage_backward.push_back(std::max<int64_t>(1, std::llround(bwd[size_t(s)] * 1e3)));
  }
  const SimResult sim = simulate_schedule(build_schedule(kind, p, m, v), m, v, costs);
  TRELLIS_CHECK(sim.ok(), "built-in schedule fails in the simulator: " + sim.report());
  const double simulated_ms = double(sim.makespan) / 1e3;

  const double step_ms = med([](const StepTimes& t) { return t.step_ms; });
  const double schedule_ms = med([](const StepTimes& t) { return t.schedule_ms; });
  const double other_ms = med([](const StepTimes& t) { return t.other_ms; });

  std::printf("%s: %s, pipeline %d, virtual stages %d, m = %d micro-batches per step; medians of %zu steps after %d "
              "warm-up\n\n",
              a.path.c_str(), schedule_name.c_str(), p, v, m, steps.size(), a.warmup);
  std::printf("| virtual stage | rank | chunk | forward ms | backward ms | fwd+bwd ms | of mean |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int s = 0; s < S; ++s) {
    const double fb = fwd[size_t(s)] + bwd[size_t(s)];
    std::printf("| %d | %d | %d | %.3f | %.3f | %.3f | %.1f%% |\n", s, s % p, s / p, fwd[size_t(s)], bwd[size_t(s)], fb,
                100.0 * fb / mean);
  }
  std::printf("\n(per micro-batch; the last stage's forward includes the head's backward, which is fused into it)\n");
  std::printf("imbalance: virtual stage %d, the slowest, takes %.1f%% of the mean forward + backward (+%.1f%%)\n\n",
              slowest_stage, 100.0 * slowest / mean, 100.0 * (slowest / mean - 1));
  std::printf("| | schedule ms | step ms | measured / predicted step |\n");
  std::printf("|---|---|---|---|\n");
  std::printf("| bubble formula, balanced stages: (m v + p - 1) x mean fwd+bwd | %.1f | %.1f | %.3f |\n", ideal_ms,
              ideal_ms + other_ms, step_ms / (ideal_ms + other_ms));
  std::printf("| simulator, measured stage times | %.1f | %.1f | %.3f |\n", simulated_ms, simulated_ms + other_ms,
              step_ms / (simulated_ms + other_ms));
  std::printf("| measured (rank 0: phase_ms.schedule, step_ms) | %.1f | %.1f | |\n", schedule_ms, step_ms);
  std::printf("\n(predicted step = predicted schedule + rank 0's measured reductions and optimizer, %.1f ms)\n", other_ms);
  return 0;
}

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) { return trellis::run_tool(trellis::run, argc, argv); }
