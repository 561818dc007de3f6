// The scopes ZeRO++'s calls are booked under in the traffic ledger: what its files book
// and the report, the planner and the tests expect (core/runtime/comm/ledger/names.h has
// the core's).
#pragma once

namespace tally::extensions::scope {

// qwZ (quantize.h): the quantised bytes, and their blocks' scales.
inline constexpr char kQwz[] = "qwz";
inline constexpr char kQwzScales[] = "qwz_scales";
// qgZ (qgz.h): the quantised gradients' all-to-alls, and their scales.
inline constexpr char kQgz[] = "qgz";
inline constexpr char kQgzScales[] = "qgz_scales";

}  // namespace tally::extensions::scope
