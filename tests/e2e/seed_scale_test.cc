// The seed's examples at real scale, as a user runs them: tally_train --dry_run measures
// each (LLaMA-7B-sized and 70B-sized GPTs of tally's shape, in bf16) and tally_plan
// predicts it; every strategy's bytes of the busiest GPU, its model states and its
// activations agree to the byte.
#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kPlan = TALLY_PLAN_BINARY;

// The JSON object a command prints last (the report, or the plan).
JsonValue LastJson(const Result& r) {
  const size_t at = r.output.rfind("\n{");
  const std::string text = r.output.substr(at == std::string::npos ? 0 : at + 1);
  absl::StatusOr<JsonValue> doc = ParseJson(text);
  EXPECT_TRUE(doc.ok()) << doc.status() << "\n" << r.output.substr(0, 2000);
  return doc.ok() ? *doc : JsonValue();
}

using RowMatch = std::function<bool(const JsonValue& row)>;

// The most bytes any rank of the report sent in the rows `match` takes.
int64_t BusiestSent(const JsonValue& report, const RowMatch& match) {
  int64_t most = 0;
  for (const JsonValue& rank : report.Find("ranks")->array) {
    int64_t sent = 0;
    for (const JsonValue& row : rank.Find("traffic")->array) {
      if (match(row)) sent += row.Find("bytes_sent")->AsInt();
    }
    most = std::max(most, sent);
  }
  return most;
}

// The most any rank held of the memory categories `keys` at their peaks, summed.
int64_t BusiestMemory(const JsonValue& report, std::initializer_list<const char*> keys) {
  int64_t most = 0;
  for (const JsonValue& rank : report.Find("ranks")->array) {
    int64_t held = 0;
    for (const char* key : keys) held += rank.Find("memory")->Find(key)->AsInt();
    most = std::max(most, held);
  }
  return most;
}

std::string Str(const JsonValue& v, const char* key) { return v.Find(key)->string; }

// A plan's strategy row: its JSON object.
const JsonValue* Strategy(const JsonValue& plan, const std::string& name) {
  for (const JsonValue& row : plan.Find("strategies")->array) {
    if (row.Find("strategy")->string == name) return &row;
  }
  return nullptr;
}

struct Example {
  const char* what;
  std::string train_flags, plan_flags;  // the same run in each program's words
  std::string strategy;                 // the plan's row
  RowMatch rows;                        // the report's rows it is
};

// LLaMA-7B's shape in tally's GPT (32 layers, h 4096, 32 heads, 32000 tokens), b = 4,
// s = 2048, bf16; the 70B one (80 layers, h 8192, 64 heads) at s = 4096.
std::string Llama7B(int dp) {
  return absl::StrCat(" --n_layer=32 --n_embd=4096 --n_head=32 --vocab_size=32000 --seq_len=2048 "
                      "--precision=bf16 --global_batch_size=",
                      4 * dp);
}

TEST(SeedAtScale, DryRunsEqualThePlanToTheByte) {
  auto dp_rows = [](const JsonValue& row) {
    return Str(row, "group") == "dp" && Str(row, "op") == "all_reduce" && Str(row, "scope").empty();
  };
  auto zero_rows = [](const JsonValue& row) {
    return Str(row, "group") == "dp" && Str(row, "op") != "all_reduce";
  };
  auto tp_rows = [](const JsonValue& row) {
    return Str(row, "group") == "tp" && absl::StartsWith(Str(row, "scope"), "layer");
  };
  auto pp_rows = [](const JsonValue& row) {
    return Str(row, "group") == "pp" && Str(row, "op") == "sendrecv";
  };
  const std::string plan7b = " --model=llama-7b --n_head=32 --vocab_size=32000 --seq_len=2048 --batch_size=4";
  const Example examples[] = {
      {"ring all-reduce over 4", Llama7B(4) + " --dp=4", plan7b + " --dp=4", "dp all-reduce", dp_rows},
      {"naive all-reduce over 4", Llama7B(4) + " --dp=4 --allreduce=naive",
       plan7b + " --dp=4 --allreduce=naive", "dp all-reduce", dp_rows},
      {"tp over 8", Llama7B(1) + " --tp=8", plan7b + " --tp=8", "tp (layers of a stage)", tp_rows},
      {"pp over 4 stages", Llama7B(1) + " --pp=4", plan7b + " --pp=4", "pp (boundaries)", pp_rows},
      {"ZeRO-1 over 8", Llama7B(8) + " --dp=8 --zero=1", plan7b + " --dp=8 --zero=1", "zero-1", zero_rows},
      {"ZeRO-3 over 8", Llama7B(8) + " --dp=8 --zero=3", plan7b + " --dp=8 --zero=3", "zero-3", zero_rows},
      {"70B, tp 8 x pp 2 x dp 8, ZeRO-1",
       " --n_layer=80 --n_embd=8192 --n_head=64 --vocab_size=32000 --seq_len=4096 --precision=bf16 "
       "--global_batch_size=32 --tp=8 --pp=2 --dp=8 --zero=1",
       " --model=llama-70b --n_head=64 --vocab_size=32000 --seq_len=4096 --batch_size=4 --tp=8 "
       "--pp=2 --dp=8 --zero=1",
       "zero-1", zero_rows},
  };
  for (const Example& x : examples) {
    SCOPED_TRACE(x.what);
    const Result run = RunCommand(kTrain + x.train_flags + " --dry_run --steps=1 --report=json");
    ASSERT_EQ(run.exit_code, 0) << run.output.substr(0, 4000);
    const Result planned = RunCommand(kPlan + x.plan_flags + " --json");
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    const JsonValue report = LastJson(run), plan = LastJson(planned);
    const JsonValue* row = Strategy(plan, x.strategy);
    ASSERT_NE(row, nullptr) << planned.output;
    EXPECT_EQ(BusiestSent(report, x.rows), row->Find("exact_bytes_per_gpu")->AsInt());
    const JsonValue& memory = *plan.Find("memory_per_gpu");
    EXPECT_EQ(BusiestMemory(report, {"params", "grads", "optimizer"}), memory.Find("bf16")->AsInt());
    EXPECT_EQ(BusiestMemory(report, {"activations"}), memory.Find("activations")->AsInt());
  }
}

// 512 ranks (tp 8 x pp 4 x dp 16 with ZeRO-1) run dry, each reported, each rank's model
// states its formula's.
TEST(SeedAtScale, FiveHundredTwelveRanksRunDry) {
  const Result r = RunCommand(kTrain + " --dry_run --n_layer=8 --n_embd=512 --n_head=8 --seq_len=256 "
                              "--tp=8 --pp=4 --dp=16 --zero=1 --global_batch_size=64 "
                              "--micro_batch_size=1 --steps=1 --report=json");
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 4000);
  const JsonValue report = LastJson(r);
  ASSERT_EQ(report.Find("ranks")->array.size(), 512u);
  // Every rank of a pipeline stage sends its boundary: 4 stages, 3 boundaries each way.
  int senders = 0;
  for (const JsonValue& rank : report.Find("ranks")->array) {
    for (const JsonValue& row : rank.Find("traffic")->array) {
      if (Str(row, "group") == "pp" && Str(row, "op") == "sendrecv" && row.Find("bytes_sent")->AsInt() > 0) {
        ++senders;
        break;
      }
    }
  }
  EXPECT_EQ(senders, 512);
}

}  // namespace
}  // namespace tally
