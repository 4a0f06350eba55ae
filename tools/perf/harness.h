// The one harness behind every test_<op> benchmark: flags, buffers, the
// correctness check, timing, the MPI baseline and the output.  Each
// executable is main.cc compiled with PERF_OP naming its row of the op table
// (harness.cc).
#pragma once

namespace perf {

// Runs the benchmark for `op` ("allreduce", "sendrecv", ...).  Returns the
// process exit status: 0, 1 (wrong results or a failed call), 2 (bad flags).
int run(const char *op, int argc, char **argv);

}  // namespace perf
