// Calls that NVIDIA's NCCL makes into the drop-in, and where they go.
//
// Under the drop-in, flagcx's NCCL pass-through loads NVIDIA's libnccl.so.2 by
// path (FLAGCX_NCCL_LIB).  That library calls some of its own exported
// functions through its PLT (2.28.3: ncclBroadcast, ncclGetVersion,
// ncclGetUniqueId, ncclGetErrorString, ncclCommGetAsyncError, ncclMemAlloc,
// ncclMemFree, ncclCommRegister, ncclCommDeregister,
// ncclCommWindowDeregister; `objdump -R libnccl.so.2 | grep nccl`), and the
// process's global scope binds those to the drop-in, which comes first.
// Loading NVIDIA's library with RTLD_DEEPBIND would avoid that, but crashed
// NCCL 2.28.3 at its first std::call_once on the H200 (pthread_once with a
// NULL routine: its weak reference to libstdc++'s __once_proxy stayed
// unresolved), so the drop-in forwards instead: each of those entry points
// first asks whether its caller is NVIDIA's library (the return address lies
// in that library's mapping) and, if so, calls NVIDIA's own function.
// Entry points that take a communicator ask only when the communicator is not
// one of ours, so the common path costs one compare.
#pragma once

namespace ncclx {

// NVIDIA's definition of `name` in the libnccl.so* (other than the drop-in)
// whose code contains `ret` (a return address), or nullptr when `ret` lies in
// no such library.  A process may hold more than one of them (torch's wheels
// load their own libnccl.so.2 by path while flagcx's pass-through loads
// FLAGCX_NCCL_LIB): each is answered with its own functions.  The loaded
// objects are rescanned only when the loader reports a change.
void *realNcclCaller(const void *ret, const char *name);

}  // namespace ncclx

// At the top of an exported entry point `name` with arguments __VA_ARGS__.
#define NCCLX_FROM_REAL_NCCL(name, ...)                                                \
  do {                                                                                 \
    if (void *real_ = ncclx::realNcclCaller(__builtin_return_address(0), #name);       \
        __builtin_expect(real_ != nullptr, 0))                                          \
      return reinterpret_cast<decltype(&name)>(real_)(__VA_ARGS__);                    \
  } while (0)

// The same for an entry point taking communicator `comm`: asked only when
// `comm` is not a drop-in communicator.
#define NCCLX_FOREIGN_COMM(name, comm, ...)                                         \
  do {                                                                              \
    if ((comm) && (comm)->magic != ncclComm::kMagic) NCCLX_FROM_REAL_NCCL(name, __VA_ARGS__); \
  } while (0)
