// Built by CMakeLists.txt against an installed flagcx: a communicator of one
// rank and an allreduce on it (a copy), enough to show that the header, the
// library and the library's data files (its algorithm scripts) were found.
#include <flagcx.h>

#include <cstdio>
#include <vector>

int main() {
  flagcxUniqueId id;
  flagcxComm_t comm;
  if (flagcxGetUniqueId(&id) != flagcxSuccess || flagcxCommInitRank(&comm, 1, &id, 0) != flagcxSuccess) {
    std::fprintf(stderr, "flagcx init failed: %s\n", flagcxGetLastError(nullptr));
    return 1;
  }
  std::vector<int> in{1, 2, 3}, out(in.size());
  flagcxResult_t r = flagcxAllReduce(in.data(), out.data(), in.size(), flagcxInt32, flagcxSum, comm, nullptr);
  int api = 0;
  flagcxGetVersion(&api);
  std::printf("flagcx through CMake: FlagCX API %d, allreduce on one rank: %d %d %d (%s)\n", api,
              out[0], out[1], out[2], flagcxGetErrorString(r));
  flagcxCommDestroy(comm);
  return r == flagcxSuccess && out == in ? 0 : 1;
}
