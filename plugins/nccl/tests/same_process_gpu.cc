// Two ranks in one process on one GPU through the drop-in: ncclCommInitAll
// with devlist {0, 0}, then allreduce / allgather / send-recv issued from one
// thread in groups on two CUDA streams.  Built and run by
// tools/dev/nccl-dropin-gpu.sh (nvcc, linked to the drop-in).  Prints OK or FAIL
// lines; exit 0 only when every result is right.
#include <cstdio>
#include <vector>

#include "nccl_gpu_check.h"

int main(int argc, char **argv) {
  int ndev = 0;
  CU(cudaGetDeviceCount(&ndev));
  const int n = 2;
  int devs[n] = {0, ndev > 1 && argc > 1 ? 1 : 0};
  ncclComm_t comm[n];
  CK(ncclCommInitAll(comm, n, devs));
  const size_t count = (1 << 20) + 3;
  std::vector<float *> in(n), out(n);
  std::vector<cudaStream_t> s(n);
  for (int k = 0; k < n; k++) {
    CU(cudaSetDevice(devs[k]));
    CU(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    CU(cudaMalloc(&in[k], count * sizeof(float)));
    CU(cudaMalloc(&out[k], n * count * sizeof(float)));
    std::vector<float> h(count);
    for (size_t i = 0; i < count; i++) h[i] = static_cast<float>(k + 1) + static_cast<float>(i % 97);
    CU(cudaMemcpy(in[k], h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }
  int bad = 0;
  for (int it = 0; it < 5; it++) {
    CK(ncclGroupStart());
    for (int k = 0; k < n; k++)
      CK(ncclAllReduce(in[k], out[k], count, ncclFloat, ncclSum, comm[k], s[k]));
    CK(ncclGroupEnd());
  }
  for (int k = 0; k < n; k++) CU(cudaStreamSynchronize(s[k]));
  for (int k = 0; k < n; k++) {
    std::vector<float> h(count);
    CU(cudaMemcpy(h.data(), out[k], count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++)
      if (h[i] != 3.0f + 2.0f * static_cast<float>(i % 97)) {
        if (bad++ < 5) printf("FAIL allreduce rank %d [%zu] = %g\n", k, i, h[i]);
      }
  }
  CK(ncclGroupStart());
  for (int k = 0; k < n; k++) CK(ncclAllGather(in[k], out[k], count, ncclFloat, comm[k], s[k]));
  CK(ncclGroupEnd());
  for (int k = 0; k < n; k++) CU(cudaStreamSynchronize(s[k]));
  for (int k = 0; k < n; k++) {
    std::vector<float> h(n * count);
    CU(cudaMemcpy(h.data(), out[k], n * count * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        if (h[r * count + i] != static_cast<float>(r + 1) + static_cast<float>(i % 97)) {
          if (bad++ < 10) printf("FAIL allgather rank %d [%d][%zu]\n", k, r, i);
        }
  }
  CK(ncclGroupStart());
  for (int k = 0; k < n; k++) {
    CK(ncclSend(in[k], count, ncclFloat, 1 - k, comm[k], s[k]));
    CK(ncclRecv(out[k], count, ncclFloat, 1 - k, comm[k], s[k]));
  }
  CK(ncclGroupEnd());
  for (int k = 0; k < n; k++) CU(cudaStreamSynchronize(s[k]));
  for (int k = 0; k < n; k++) {
    std::vector<float> h(count);
    CU(cudaMemcpy(h.data(), out[k], count * sizeof(float), cudaMemcpyDeviceToHost));
    if (h[5] != static_cast<float>(2 - k) + 5.0f && bad++ < 12) printf("FAIL sendrecv rank %d\n", k);
  }
  for (int k = 0; k < n; k++) CK(ncclCommDestroy(comm[k]));
  printf("%s: 2 ranks in one process on GPU(s) %d,%d: allreduce x5, allgather, send/recv (%d wrong)\n",
         bad ? "FAIL" : "OK", devs[0], devs[1], bad);
  return bad != 0;
}
