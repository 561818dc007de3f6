// The trainer's loop (Trainer::Run): the header lines, every step's line and metrics row,
// evaluation, samples, checkpoints and the stop at a step boundary. One step is
// trainer.cc's TrainStep; a pipelined one pipelined_step.cc's.
#include "core/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/clock.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/signals.h"
#include "core/runtime/status_macros.h"

namespace tally::train {

namespace {

std::string StepJson(const StepStats& s, bool moe, bool compresses) {
  JsonWriter w;
  w.BeginObject();
  w.Key("step").Int(s.step).Key("loss").Double(s.loss).Key("lr").Double(s.lr);
  w.Key("grad_norm").Double(s.grad_norm).Key("ms").Double(s.ms);
  w.Key("tokens_per_s").Double(s.tokens_per_s).Key("gflops").Double(s.gflops);
  if (compresses) w.Key("compression_error").Double(s.compression_error);
  if (moe) {
    w.Key("aux_loss").Double(s.aux_loss).Key("dropped_fraction").Double(s.dropped);
    w.Key("expert_tokens_min").Double(s.expert_tokens_min);
    w.Key("expert_tokens_mean").Double(s.expert_tokens_mean);
    w.Key("expert_tokens_max").Double(s.expert_tokens_max);
  }
  w.EndObject();
  return w.str();
}

// An error naming the step, the rank and what was not finite, if the loss or the
// gradient norm is not.
absl::Status Finite(const StepStats& s, int rank) {
  if (std::isfinite(s.loss) && std::isfinite(s.grad_norm)) return absl::OkStatus();
  auto name = [](double x) { return std::isnan(x) ? std::string("nan") : absl::StrCat(x); };
  return absl::InternalError(absl::StrCat("[train] step ", s.step, " (rank ", rank, "): loss is ",
                                          name(s.loss), ", grad norm ", name(s.grad_norm),
                                          "; stopping (try a lower --lr)"));
}

std::string ValJson(int64_t step, float val_loss) {
  JsonWriter w;
  w.BeginObject().Key("step").Int(step).Key("val_loss").Double(val_loss).EndObject();
  return w.str();
}

}  // namespace

void Trainer::LogHeader(std::ostream& log) {
  const model::GPTConfig& c = options_.model;
  const std::string data =
      options_.dry_run
          ? "data: none (a dry run: meta tensors, no values)"
          : absl::StrFormat("data: %s, %d bytes (train %d, val %d tokens); unigram entropy %.3f "
                            "nats, uniform ln(256) = %.3f",
                            data_.source, data_.bytes, data_.train.tokens(), data_.val.tokens(),
                            data_.unigram_entropy, std::log(256.0));
  log << absl::StrFormat(
      "model: %s, %d parameters\n%s\nbatch: %d sequences x %d tokens per step; dp=%d "
      "(zero=%d)%s x tp=%d x pp=%d, each dp rank %d micro-batch(es) of %d; %s, lr %g -> %g, "
      "warm-up %d, "
      "%d steps\n",
      c.ToString(), c.NumParams(), data, options_.training.global_batch_size, c.seq_len,
      options_.parallel.dp, options_.parallel.zero, options_.CpWords(), options_.parallel.tp,
      options_.parallel.pp,
      options_.accumulation_steps(), options_.training.micro_batch_size, optimizer().name(),
      options_.training.lr, options_.training.min_lr, options_.training.warmup_steps,
      options_.training.steps);
  if (start_step_ > 0) {
    log << "resumed from '" << options_.checkpoint.load << "' at step " << start_step_ << "\n";
  }
  // Training goes on; only the text differs from what the checkpoint learnt.
  const model::TrainedOn& was = loaded_from_;
  if (!was.data.empty() && (was.data_bytes != data_.bytes || was.data_fnv1a64 != data_.fingerprint)) {
    std::cerr << "[train] warning: '" << options_.checkpoint.load << "' was trained on "
              << was.DataName() << "; this run trains on " << data_.source << " (" << data_.bytes
              << " bytes), other text\n";
  }
  if (options_.parallel.recompute_attention) {
    log << "selective recompute: no layer keeps attention's probabilities; backward makes them "
           "again\n";
  } else if (options_.parallel.LayerRecompute()) {
    log << "full recompute, layer by layer: a layer keeps only its input; backward runs its "
           "forward again first\n";
  }
  if (options_.parallel.pp > 1) {
    const int m = options_.accumulation_steps();
    const int v = options_.parallel.virtual_stages;
    log << absl::StrFormat(
        "pipeline: %d stages%s, %s, %d micro-batches of %d per step%s\n", options_.parallel.pp,
        v > 1 ? absl::StrCat(" x ", v, " chunks") : "", parallel::Name(options_.parallel.schedule),
        m, options_.training.micro_batch_size, options_.parallel.recompute ? ", recompute" : "");
    if (options_.output.show_schedule) {
      log << "schedule, one slot per forward (F) and per backward (B) of a micro-batch"
          << (v > 1 ? " on a chunk (a: the stage's first chunk, b: its second, ...)" : "") << ":\n"
          << parallel::ScheduleChart(parallel::Simulate(options_.parallel.schedule,
                                                        options_.parallel.pp, m,
                                                        /*backward_slots=*/1, v));
    }
  }
}

absl::Status Trainer::LogSample(std::ostream& log) {
  ASSIGN_OR_RETURN(std::string text, Sample(options_.sampling.sample_bytes));
  log << "sample (temperature " << options_.sampling.temperature << ", top-k "
      << options_.sampling.top_k << (options_.sampling.prompt.empty() ? "" : ", after the prompt")
      << "):\n"
      << options_.sampling.prompt << text << "\n";
  return absl::OkStatus();
}

absl::Status Trainer::SampleOnly(std::ostream& log) {
  const model::GPTConfig& c = options_.model;
  log << absl::StrFormat("model: %s, %d parameters\n", c.ToString(), c.NumParams())
      << "sampling from '" << options_.checkpoint.load << "' (saved at step " << start_step_
      << ", trained on " << loaded_from_.DataName() << "), no training\n";
  if (!Evaluates()) return absl::OkStatus();
  return LogSample(log);
}

// Long, and kept whole: the run's loop, each step with its log line, metrics, evaluation
// and checkpoint, then the end of the run (save, signal, sample) in that order.
absl::Status Trainer::Run(std::ostream& out) {
  // Every rank trains and takes part in saving (ZeRO gathers the shards); rank 0 alone
  // logs, and evaluates and samples on its replica, which adds no traffic. ZeRO-3 ranks
  // have no replica: they all evaluate and sample, gathering the parameters (phase eval).
  std::ostream null(nullptr);
  std::ostream& log = logs() ? out : null;
  if (options_.sampling.sample_only) return SampleOnly(log);
  LogHeader(log);
  std::ofstream metrics;
  if (logs() && !options_.output.metrics_json.empty()) {
    metrics.open(options_.output.metrics_json, std::ios::trunc);
    if (!metrics) {
      return absl::InvalidArgumentError("[train] cannot write '" + options_.output.metrics_json +
                                        "'");
    }
  }
  auto write_metrics = [&](const std::string& line) -> absl::Status {
    if (!metrics.is_open()) return absl::OkStatus();
    metrics << line << "\n" << std::flush;
    if (!metrics) {
      return absl::DataLossError("[train] failed writing '" + options_.output.metrics_json + "'");
    }
    return absl::OkStatus();
  };
  int64_t done = start_step_;  // steps trained, counted from the first
  bool stopped = false;         // by a signal, before the step every rank agreed on
  // A run of many ranks records its last training step's timeline (core/runtime/timeline.h):
  // the report replays it on the modelled cluster (lab/report/replay.h) and reads who waited
  // for whom from its stamps. Evaluation, checkpoints and sampling are not in it.
  Timeline* timeline = world_ != nullptr ? &world_->ledger().timeline() : nullptr;
  ScopedTimeline kernels_record_into(timeline);
  for (int64_t k = start_step_; k < options_.training.steps; ++k) {
    if (stop_ != nullptr) {
      ASSIGN_OR_RETURN(stopped, stop_->StopBefore(k));
      if (stopped) break;
    }
    if (timeline != nullptr) {
      timeline->Clear();
      timeline->set_recording(true);
    }
    const int64_t cpu = ThreadCpuNanos();
    ASSIGN_OR_RETURN(StepStats s, TrainStep(k));
    cpu_nanos_ += ThreadCpuNanos() - cpu;
    if (timeline != nullptr) timeline->set_recording(false);
    // Every rank holds the same loss (averaged) and norm (all-reduced): all stop here.
    RETURN_IF_ERROR(Finite(s, world_ != nullptr ? world_->rank() : 0));
    done = s.step;
    losses_.push_back(s.loss);
    if (options_.parallel.Compresses() && !options_.dry_run) {
      compression_errors_.push_back(s.compression_error);  // a dry run computes none
    }
    if (options_.dry_run) {  // no values, and no measured time: its code computes nothing
      log << absl::StrFormat("step %5d/%d | dry run (meta tensors: no values, no payload)\n",
                             s.step, options_.training.steps)
          << std::flush;
      continue;
    }
    log << absl::StrFormat(
        "step %5d/%d | loss %.4f | lr %.2e | grad norm %.3f | %7.1f ms | %7.0f tok/s | %5.1f "
        "GFLOP/s",
        s.step, options_.training.steps, s.loss, s.lr, s.grad_norm, s.ms, s.tokens_per_s, s.gflops);
    if (options_.model.moe()) {
      log << absl::StrFormat(" | aux %.4f | dropped %.1f%% | tokens/expert %.0f..%.0f", s.aux_loss,
                             100 * s.dropped, s.expert_tokens_min, s.expert_tokens_max);
    }
    if (options_.parallel.Compresses()) log << absl::StrFormat(" | error %.2e", s.compression_error);
    log << "\n" << std::flush;
    RETURN_IF_ERROR(
        write_metrics(StepJson(s, options_.model.moe(), options_.parallel.Compresses())));
    bool evaluate = options_.data.eval_every > 0 &&
                    (s.step % options_.data.eval_every == 0 || s.step == options_.training.steps);
    if (Evaluates() && evaluate) {
      ASSIGN_OR_RETURN(float val, Evaluate());
      val_losses_.push_back({s.step, val});
      log << absl::StrFormat("step %5d/%d | val loss %.4f\n", s.step, options_.training.steps, val)
          << std::flush;
      RETURN_IF_ERROR(write_metrics(ValJson(s.step, val)));
    }
    if (options_.checkpoint.save_every > 0 && s.step % options_.checkpoint.save_every == 0 &&
        s.step < options_.training.steps) {
      RETURN_IF_ERROR(Save(options_.checkpoint.save, s.step));
    }
  }
  if (!options_.checkpoint.save.empty()) {
    int64_t step = stopped ? done : std::max(start_step_, options_.training.steps);
    RETURN_IF_ERROR(Save(options_.checkpoint.save, step));
    log << "saved '" << options_.checkpoint.save << "' at step " << step << "\n" << std::flush;
  }
  if (stopped) {
    // Every rank returns it; the message is rank 0's.
    return absl::CancelledError(
        !logs() ? ""
                : absl::StrCat("[train] stopped by ", SignalName(stop_->signal()), " after step ",
                               done, " of ", options_.training.steps,
                               options_.checkpoint.save.empty()
                                   ? ""
                                   : absl::StrCat(" (checkpoint '", options_.checkpoint.save,
                                                  "' at step ", done, ")")));
  }
  if (Evaluates() && options_.sampling.sample_bytes > 0) RETURN_IF_ERROR(LogSample(log));
  return absl::OkStatus();
}

}  // namespace tally::train
