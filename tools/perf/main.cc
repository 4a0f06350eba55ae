// test_<op>: PERF_OP is set per executable in meson.build.
#include "harness.h"

int main(int argc, char **argv) { return perf::run(PERF_OP, argc, argv); }
