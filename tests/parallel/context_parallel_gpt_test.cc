// The GPT under context parallelism against the serial model: over 2 and 4 thread ranks,
// each holding its pieces of every sequence, in every variant (p2p, allgather, a2a; zigzag
// and none), the mean loss and the gradients summed over the cp group equal the serial
// model's on the whole sequences, and every cp ledger row equals ContextParallelCalls.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/model/gpt.h"
#include "core/parallel/context_parallel.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "tests/parallel/cp_variants.h"
#include "tests/sweep.h"

namespace tally::parallel {
namespace {

model::GPTConfig Small() {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.seq_len = 16;
  c.vocab_size = 64;
  return c;
}

std::vector<int32_t> RandomIds(int64_t n, int v, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> d(0, v - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = d(gen);
  return ids;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

using Variant = CpVariant;

class ContextParallelGptTest : public ::testing::TestWithParam<Variant> {};

TEST_P(ContextParallelGptTest, LossAndGradientsEqualTheSerialModel) {
  const Variant variant = GetParam();
  const model::GPTConfig config = Small();
  const int b = 2, t = config.seq_len, n = variant.ranks;
  const std::vector<int32_t> tokens = RandomIds(int64_t(b) * t, config.vocab_size, 7);
  const std::vector<int32_t> targets = RandomIds(int64_t(b) * t, config.vocab_size, 8);
  const float dloss = 1.0f / float(b * t);

  Result serial;
  {
    MemoryLedger ledger;
    Allocator alloc(&ledger);
    auto gpt = model::GPT::Create(config, alloc, 1).value();
    ASSERT_TRUE(gpt->ZeroGrad().ok());
    serial.loss = gpt->Forward(tokens.data(), targets.data(), b).value();
    ASSERT_TRUE(gpt->Backward(dloss).ok());
    const float* g = gpt->grads().data<float>();
    serial.grads.assign(g, g + gpt->grads().numel());
  }

  Result split;
  comm::LaunchOptions options;
  options.world_size = n;
  const absl::Status status =
      comm::RunThreadRanks(options, [&](comm::Communicator& world) -> absl::Status {
        ASSIGN_OR_RETURN(auto cp, world.Split(0, world.rank(), comm::group::kCp));
        ContextParallel sequence(*cp, cp->allocator(), variant.comm, variant.balance, t);
        ASSIGN_OR_RETURN(auto gpt, model::GPT::Create(config, cp->allocator(), 1));
        RETURN_IF_ERROR(gpt->SetSequenceSplit(&sequence));
        // This rank's positions of each sequence, in order.
        std::vector<int32_t> my_tokens, my_targets;
        for (int i = 0; i < b; ++i) {
          for (const model::PositionRun& run : sequence.positions()) {
            const int64_t at = int64_t(i) * t + run.start;
            my_tokens.insert(my_tokens.end(), tokens.begin() + at,
                             tokens.begin() + at + run.length);
            my_targets.insert(my_targets.end(), targets.begin() + at,
                              targets.begin() + at + run.length);
          }
        }
        RETURN_IF_ERROR(gpt->ZeroGrad());
        comm::TrafficLedger& ledger = cp->ledger();
        float loss = 0;
        {
          comm::PhaseScope phase(ledger, comm::Phase::kForward);
          ASSIGN_OR_RETURN(loss, gpt->Forward(my_tokens.data(), my_targets.data(), b));
        }
        {
          comm::PhaseScope phase(ledger, comm::Phase::kBackward);
          RETURN_IF_ERROR(gpt->Backward(dloss));
        }
        // The calls the layers made, before the test's own sums.
        const comm::ExpectedCalls calls = ContextParallelCalls({.comm = variant.comm,
                                                                .ranks = n,
                                                                .rank = cp->rank(),
                                                                .batch = b,
                                                                .seq_len = t,
                                                                .channels = config.n_embd,
                                                                .layers = {0, 1}});
        int rows = 0;
        for (const auto& [key, totals] : ledger.calls()) {
          if (key.group != comm::group::kCp) continue;
          ++rows;
          const int64_t sent =
              ledger.Sum([&](const comm::LedgerKey& k) { return k == key; }).bytes_sent;
          EXPECT_EQ(sent, comm::ExpectedSent(calls, key)) << key.RowName();
        }
        EXPECT_EQ(rows, 2 * config.n_layer);  // each layer's forward and backward
        RETURN_IF_ERROR(cp->AllReduce(gpt->grads(), comm::ReduceOp::kSum));
        ASSIGN_OR_RETURN(const double mean,
                         cp->AllReduceValue(loss, DType::kF64, comm::ReduceOp::kAvg));
        if (cp->rank() == 0) {
          split.loss = mean;
          const float* g = gpt->grads().data<float>();
          split.grads.assign(g, g + gpt->grads().numel());
        }
        return absl::OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_NEAR(split.loss, serial.loss, 1e-5);
  ASSERT_EQ(split.grads.size(), serial.grads.size());
  float largest = 0, diff = 0;
  for (size_t i = 0; i < serial.grads.size(); ++i) {
    largest = std::max(largest, std::abs(serial.grads[i]));
    diff = std::max(diff, std::abs(split.grads[i] - serial.grads[i]));
  }
  EXPECT_GT(largest, 0.0f);
  EXPECT_LT(diff, 1e-5f * largest) << "largest gradient " << largest;
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, ContextParallelGptTest,
                         ::testing::ValuesIn(Sweep(EveryCpVariant())), CpVariantName);

TEST(ContextParallelGpt, WhatItCannotRunSaysWhy) {
  comm::LaunchOptions options;
  options.world_size = 2;
  const absl::Status status =
      comm::RunThreadRanks(options, [&](comm::Communicator& world) -> absl::Status {
        model::GPTConfig config = Small();
        config.seq_len = 15;
        ContextParallel sequence(world, world.allocator(), CpComm::kP2p, CpLoadBalance::kNone,
                                 config.seq_len);
        ASSIGN_OR_RETURN(auto gpt, model::GPT::Create(config, world.allocator(), 1));
        EXPECT_EQ(gpt->SetSequenceSplit(&sequence).message(),
                  "[GPT] context parallelism (cp=2) needs seq_len=15 divisible by cp");
        ASSIGN_OR_RETURN(auto other, model::GPT::Create(Small(), world.allocator(), 1));
        other->SetRecompute(model::Recompute::kAttention);
        EXPECT_EQ(other->SetSequenceSplit(&sequence).message(),
                  "[GPT] context parallelism (cp=2) keeps no probabilities to make again (no "
                  "selective recompute)");
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tally::parallel
