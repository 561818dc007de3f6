// How far a compressed path moved what it sent, the "error beside bytes" of ZeRO++'s qwZ
// (zero/quantize.h) and PowerSGD (powersgd.h): tally is bit-deterministic, so each rank
// knows exactly what it had and what the wire carried for it.
//
//   residual = Σ (carried − had)²      value = Σ had²      (fp64, over one step)
//
// summed over the world's ranks once a step (core/train/trainer.h), and reported as the
// relative error sqrt(residual / value).
#pragma once

namespace tally::parallel {

struct ErrorSums {
  double residual = 0, value = 0;
  void Add(const ErrorSums& o) {
    residual += o.residual;
    value += o.value;
  }
};

}  // namespace tally::parallel
