// flagcx-algo scale: one rank's init compile work and memory at N ranks.
#pragma once
#include <vector>

namespace flagcx_algo {

// Simulates (no processes) what communicator init does on `rank` of each N
// in `nranks`, with ranksPerHost ranks per host, timing the best of `repeat`
// runs.  Prints a table per N, or with `csv` one line per algorithm and per
// init.  Returns the exit status.
int cmdScale(const std::vector<int> &nranks, int rank, int ranksPerHost, int repeat, bool csv);

}  // namespace flagcx_algo
