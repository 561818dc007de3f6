// The report's rows (report.cc), which its text, CSV and JSON forms (lab/report/json.cc)
// share: one per ledger key, with the calls and bytes of every rank that made them.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "lab/report/report.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/comm/nodes.h"

namespace tally::report {

// A key's figures over the ranks: min..max of what each rank sent, in all and across
// nodes, and of the formula's (exact_known: every rank's has one).
struct Row {
  int64_t calls = 0;
  int64_t sent_min = std::numeric_limits<int64_t>::max(), sent_max = 0;
  int64_t inter_min = std::numeric_limits<int64_t>::max(), inter_max = 0;  // across nodes
  int64_t exact_min = std::numeric_limits<int64_t>::max(), exact_max = 0;
  bool exact_known = true;
  double busbw_min = std::numeric_limits<double>::max(), busbw_max = 0;  // GB/s
};

// The report's rows: per key, calls and bytes sent per rank (min..max over the ranks that
// made the call), the formula's.
std::map<comm::LedgerKey, Row> Rows(const ReportInputs& in);
// Rank r's bytes sent under each key, by link class.
std::map<comm::LedgerKey, comm::LinkBytes> SentByKey(const ReportInputs& in, const comm::Nodes& nodes,
                                                     int r);

// The ranks of a group, by its name.
int GroupSize(const train::TrainOptions& o, const std::string& group);
// nccl-tests' bus bandwidth of a rank's calls under a key, GB/s (0 when they took no
// time, and for point-to-point rows: a non-blocking transfer's time overlaps compute).
double BusBandwidth(const train::TrainOptions& o, const comm::LedgerKey& key,
                    const comm::CallTotals& c);
// The transport's own collectives: the ledger books the ring's bytes for them.
bool BytesAsRing(const comm::LedgerKey& key);
// "lo" or "lo..hi".
std::string Range(int64_t lo, int64_t hi);
// The algorithm in the text table's 6-wide column ("hier": hierarchical).
const char* AlgoColumn(comm::Algorithm a);
// The row's busbw over its ranks, GB/s ("-" when no call took measurable time).
std::string BandwidthRange(const Row& row);

}  // namespace tally::report
