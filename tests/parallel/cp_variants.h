// The variants the context-parallel tests run: every --cp_comm, contiguous and zigzag
// pieces, over 2 and 4 ranks, each named as "p2p_zigzag_cp4".
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/parallel/context_parallel.h"

namespace tally::parallel {

struct CpVariant {
  CpComm comm;
  CpLoadBalance balance;
  int ranks;
};

inline void PrintTo(const CpVariant& v, std::ostream* os) {
  *os << Name(v.comm) << " " << Name(v.balance) << " cp" << v.ranks;
}

inline std::vector<CpVariant> EveryCpVariant() {
  std::vector<CpVariant> v;
  for (CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
    for (CpLoadBalance balance : {CpLoadBalance::kNone, CpLoadBalance::kZigzag}) {
      for (int ranks : {2, 4}) v.push_back({comm, balance, ranks});
    }
  }
  return v;
}

inline std::string CpVariantName(const ::testing::TestParamInfo<CpVariant>& param) {
  return std::string(Name(param.param.comm)) + "_" + Name(param.param.balance) + "_cp" +
         std::to_string(param.param.ranks);
}

}  // namespace tally::parallel
