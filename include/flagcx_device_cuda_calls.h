/* flagcx device API for CUDA kernels: the entry points (FlagCX's names and
 * argument order) over the helpers of flagcx_device_cuda.h, which includes
 * this file; do not include directly. */
#ifndef FLAGCX_DEVICE_CUDA_CALLS_H_
#define FLAGCX_DEVICE_CUDA_CALLS_H_

#define FLAGCX_CUDA_PUT_PARAMS                                                                \
  const void *comm, const void *dst, size_t dstOffset, const void *src, size_t srcOffset,    \
      size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t contextId,     \
      flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t order
#define FLAGCX_CUDA_PUT(fn, sig, add, ctr)                                                    \
  (void)contextId, (void)order;                                                              \
  flagcx_dev::PutArgs a = {comm, dst, src, dstOffset, srcOffset, bytes, teamKind, peer,       \
                           coopKind, scope, sig, ctr, add};                                  \
  flagcx_dev::put(a, fn)

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut(FLAGCX_CUDA_PUT_PARAMS) {
  FLAGCX_CUDA_PUT("flagcxDevPut", FLAGCX_DEV_NONE, 0, FLAGCX_DEV_NONE);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigInc(
    FLAGCX_CUDA_PUT_PARAMS, flagcxDevSignal_t remoteSignal) {
  FLAGCX_CUDA_PUT("flagcxDevPut_RSigInc", remoteSignal, 1, FLAGCX_DEV_NONE);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigAdd(
    FLAGCX_CUDA_PUT_PARAMS, flagcxDevSignal_t remoteSignal, uint64_t signalValue) {
  FLAGCX_CUDA_PUT("flagcxDevPut_RSigAdd", remoteSignal, signalValue, FLAGCX_DEV_NONE);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_LCtrInc(
    FLAGCX_CUDA_PUT_PARAMS, flagcxDevCounter_t localCounter) {
  FLAGCX_CUDA_PUT("flagcxDevPut_LCtrInc", FLAGCX_DEV_NONE, 0, localCounter);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigInc_LCtrInc(
    FLAGCX_CUDA_PUT_PARAMS, flagcxDevSignal_t remoteSignal, flagcxDevCounter_t localCounter) {
  FLAGCX_CUDA_PUT("flagcxDevPut_RSigInc_LCtrInc", remoteSignal, 1, localCounter);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPut_RSigAdd_LCtrInc(
    FLAGCX_CUDA_PUT_PARAMS, flagcxDevSignal_t remoteSignal, uint64_t signalValue,
    flagcxDevCounter_t localCounter) {
  FLAGCX_CUDA_PUT("flagcxDevPut_RSigAdd_LCtrInc", remoteSignal, signalValue, localCounter);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevGet(
    const void *comm, const void *src, size_t srcOffset, const void *dst, size_t dstOffset,
    size_t bytes, flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  const flagcx_dev::Mem *s = (const flagcx_dev::Mem *)src, *d = (const flagcx_dev::Mem *)dst;
  int w = flagcx_dev::worldOf(v, teamKind, peer, "flagcxDevGet");
  if (w < 0 || !flagcx_dev::inRange(v, "flagcxDevGet", srcOffset, bytes, s->peerSize[w]) ||
      !flagcx_dev::inRange(v, "flagcxDevGet", dstOffset, bytes, d->size))
    return;
  if (v->queue) { /* complete after flagcxDevFlush */
    flagcx_dev::coopSync(coopKind);
    if (flagcx_dev::coopOf(coopKind).rank == 0) {
      flagcxDevDesc x = flagcx_dev::desc(flagcxDevOpGet, w);
      x.dstMem = d->id, x.srcMem = s->id, x.dstOff = dstOffset, x.srcOff = srcOffset;
      x.bytes = bytes;
      flagcx_dev::enqueue(v, x);
    }
    flagcx_dev::coopSync(coopKind);
    return;
  }
  if (!flagcx_dev::mappedOk(v, "flagcxDevGet", s->peerBase[w], w)) return;
  flagcx_dev::fence(flagcx_dev::gpuScope(v, w, scope));
  flagcx_dev::coopCopy(d->base + dstOffset, s->peerBase[w] + srcOffset, bytes,
                       flagcx_dev::coopOf(coopKind));
  flagcx_dev::coopSync(coopKind);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPutValue(
    const void *comm, const void *dst, size_t dstOffset, uint64_t value,
    flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t, flagcxDevCoopKind_t coopKind,
    flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t) {
  flagcx_dev::putValue(comm, dst, dstOffset, value, teamKind, peer, coopKind, scope,
                       FLAGCX_DEV_NONE, 0);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPutValue_RSigInc(
    const void *comm, const void *dst, size_t dstOffset, uint64_t value,
    flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t, flagcxDevCoopKind_t coopKind,
    flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t, flagcxDevSignal_t remoteSignal) {
  flagcx_dev::putValue(comm, dst, dstOffset, value, teamKind, peer, coopKind, scope,
                       remoteSignal, 1);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevPutValue_RSigAdd(
    const void *comm, const void *dst, size_t dstOffset, uint64_t value,
    flagcxDevTeamKind_t teamKind, int peer, flagcxDevContext_t, flagcxDevCoopKind_t coopKind,
    flagcxDevMemoryScope_t scope, flagcxDevMemoryOrder_t, flagcxDevSignal_t remoteSignal,
    uint64_t signalValue) {
  flagcx_dev::putValue(comm, dst, dstOffset, value, teamKind, peer, coopKind, scope,
                       remoteSignal, signalValue);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevSignalAdd(
    const void *comm, flagcxDevTeamKind_t teamKind, int peer, flagcxDevSignal_t signal,
    uint64_t value, flagcxDevContext_t, flagcxDevCoopKind_t coopKind,
    flagcxDevMemoryScope_t scope) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  int w = flagcx_dev::worldOf(v, teamKind, peer, "flagcxDevSignalAdd");
  flagcx_dev::coopSync(coopKind);
  if (w >= 0 && flagcx_dev::coopOf(coopKind).rank == 0)
    flagcx_dev::signalRow(v, w, signal, value, flagcx_dev::gpuScope(v, w, scope));
  flagcx_dev::coopSync(coopKind);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevSignalInc(
    const void *comm, flagcxDevTeamKind_t teamKind, int peer, flagcxDevSignal_t signal,
    flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind, flagcxDevMemoryScope_t scope) {
  flagcxDevSignalAdd(comm, teamKind, peer, signal, 1, contextId, coopKind, scope);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR uint64_t flagcxDevReadSignal(
    const void *comm, flagcxDevSignal_t signal, int bits, flagcxDevContext_t,
    flagcxDevMemoryOrder_t) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  return flagcx_dev::masked(flagcx_dev::rowSum(v, signal) - v->signalBase[signal], bits);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR uint64_t flagcxDevReadCounter(
    const void *comm, flagcxDevCounter_t counter, int bits, flagcxDevContext_t,
    flagcxDevMemoryOrder_t) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  return flagcx_dev::masked(
      flagcx_dev::SysAtomic(v->counters[counter]).load(cuda::memory_order_acquire), bits);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevWaitSignal(
    const void *comm, flagcxDevSignal_t signal, uint64_t least, int bits,
    flagcxDevContext_t contextId, flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order) {
  flagcx_dev::coopSync(coopKind);
  if (flagcx_dev::coopOf(coopKind).rank == 0) {
    flagcx_dev::Spin spin = flagcx_dev::spinStart((const flagcx_dev::View *)comm);
    while (flagcxDevReadSignal(comm, signal, bits, contextId, order) <
               flagcx_dev::masked(least, bits) &&
           flagcx_dev::spinOnce(spin)) {
    }
  }
  flagcx_dev::coopSync(coopKind);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevWaitCounter(
    const void *comm, flagcxDevCounter_t counter, uint64_t least, int bits, flagcxDevContext_t,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  flagcx_dev::coopSync(coopKind);
  if (flagcx_dev::coopOf(coopKind).rank == 0)
    flagcx_dev::spinUntil(v, &v->counters[counter], flagcx_dev::masked(least, bits), bits);
  flagcx_dev::coopSync(coopKind);
}

/* Mapped peers: a put is complete when its stores are fenced.  Via the
 * proxy: once the proxy finished every ticket taken so far. */
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevFlush(
    const void *comm, flagcxDevContext_t, flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  __threadfence_system();
  flagcx_dev::coopSync(coopKind);
  if (v->queue && flagcx_dev::coopOf(coopKind).rank == 0) flagcx_dev::drain(v);
  flagcx_dev::coopSync(coopKind);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevResetSignal(
    const void *comm, flagcxDevContext_t, flagcxDevSignal_t slot) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  v->signalBase[slot] = flagcx_dev::rowSum(v, slot);
  v->shadow[slot] = 0;
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevResetCounter(
    const void *comm, flagcxDevContext_t, flagcxDevCounter_t slot) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  flagcx_dev::SysAtomic(v->counters[slot]).store(0, cuda::memory_order_release);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevIncreaseSignalShadow(
    const void *comm, flagcxDevContext_t, flagcxDevSignal_t slot, uint64_t delta) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  atomicAdd(reinterpret_cast<unsigned long long *>(&v->shadow[slot]), delta);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevWaitSignalMeetShadow(
    const void *comm, flagcxDevContext_t contextId, flagcxDevSignal_t slot, int bits,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  flagcxDevWaitSignal(comm, slot, v->shadow[slot], bits, contextId, coopKind, order);
}

FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevBarrierArrive(
    const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index, flagcxDevContext_t,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t, flagcxDevMemoryScope_t scope) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  if (!flagcx_dev::barrierOk(v, teamKind, index)) return;
  bool gpu = flagcx_dev::teamGpuScope(v, teamKind, scope);
  flagcx_dev::fence(gpu);
  flagcx_dev::coopSync(coopKind);
  if (flagcx_dev::coopOf(coopKind).rank == 0) flagcx_dev::arrive(v, teamKind, index, gpu);
  flagcx_dev::coopSync(coopKind);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevBarrierWait(
    const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index, flagcxDevContext_t,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t, flagcxDevMemoryScope_t) {
  const flagcx_dev::View *v = (const flagcx_dev::View *)comm;
  if (!flagcx_dev::barrierOk(v, teamKind, index)) return;
  flagcx_dev::coopSync(coopKind);
  if (flagcx_dev::coopOf(coopKind).rank == 0) flagcx_dev::barrierWait(v, teamKind, index);
  flagcx_dev::coopSync(coopKind);
}
FLAGCX_DEV_CALL FLAGCX_DEVICE_DECORATOR void flagcxDevBarrierSync(
    const void *comm, flagcxDevTeamKind_t teamKind, uint32_t index, flagcxDevContext_t contextId,
    flagcxDevCoopKind_t coopKind, flagcxDevMemoryOrder_t order, flagcxDevMemoryScope_t scope) {
  flagcxDevBarrierArrive(comm, teamKind, index, contextId, coopKind, order, scope);
  flagcxDevBarrierWait(comm, teamKind, index, contextId, coopKind, order, scope);
}

#undef FLAGCX_CUDA_PUT
#undef FLAGCX_CUDA_PUT_PARAMS

#endif /* FLAGCX_DEVICE_CUDA_CALLS_H_ */
