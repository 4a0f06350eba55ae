// Every FLAGCX_* variable, declared once: X(NAME, KIND, DEFAULT, DOC).
// KIND is Int, Str or Ack.  NAME is given without the FLAGCX_ prefix.
// This is the only place a variable is declared; `flagcx-info --env` lists
// them all, and an unknown FLAGCX_* name in the environment draws a warning.
// Keep it sorted by area; add new variables here, never getenv() elsewhere in
// the library.  The plugins and tools/perf, built apart from libflagcx, read a
// few of these by name with getenv(), as a user's program may.
//
// Ack: a variable FlagCX 0.13 documents that has no effect here; when set it
// draws one INFO line with DOC, which says why (docs/COMPATIBILITY.md).
//
// XCHECK(NAME, SPEC) right after a variable: what values it accepts, checked
// when the environment is read (base/params.cc).  SPEC is "MIN..MAX" (either
// end may be left out) or a single value, alternatives joined by |, for Int; "A|B|C" (case-insensitive) for Str, or
// "list:A|B|C" for a comma list of those names (a leading ^ allowed).  A
// value outside draws one WARN naming the variable, the value given and the
// value used instead (the default; for a list, the names it knows).

// Logging
X(DEBUG, Str, "WARN", "log level: NONE, VERSION, WARN, INFO or TRACE (ABORT, FlagCX's, logs as WARN)")
XCHECK(DEBUG, "NONE|VERSION|WARN|INFO|ABORT|TRACE")
X(DEBUG_SUBSYS, Str, "INIT,ENV", "subsystems logged at INFO/TRACE: INIT,COLL,P2P,NET,SHM,BOOTSTRAP,ENV,TUNING,ALLOC,ALL; ^ negates (FlagCX's GRAPH,CALL,PROXY,NVLS,REG are accepted and log nothing here)")
XCHECK(DEBUG_SUBSYS, "list:INIT|COLL|P2P|NET|SHM|BOOTSTRAP|ENV|TUNING|ALLOC|ALL|GRAPH|CALL|PROXY|NVLS|REG")
X(DEBUG_FILE, Str, "", "write the log to this file instead of stderr; %h = host, %p = pid")

// Devices
X(DEVICE, Str, "auto", "device adapter: auto, host or cuda")

// Bootstrap
X(COMM_ID, Str, "", "host:port of the root; every rank derives the same unique id from it (and from FLAGCX_COMM_SECRET)")
X(COMM_SECRET, Str, "", "FLAGCX_COMM_ID jobs: shared secret, 16+ characters, equal on every rank; only holders join (unset: anyone who reaches the root's port can)")
X(COMM_SECRET_FILE, Str, "", "FLAGCX_COMM_ID jobs: file holding the secret instead (regular file, mode 0600 or stricter, at most 4 KiB), kept out of command lines")
X(SOCKET_IFNAME, Str, "", "network interfaces to use: prefix match, ^ to exclude, = for exact names")
X(SOCKET_FAMILY, Str, "", "address family of the interface: AF_INET or AF_INET6 (empty: either)")
XCHECK(SOCKET_FAMILY, "|AF_INET|AF_INET6")
X(HOSTID, Str, "", "host identity override (ranks with equal ids share a host)")
X(TIMEOUT, Int, "600", "seconds any blocking wait may last before it fails")
XCHECK(TIMEOUT, "1..100000000")  // larger overflows the nanosecond clocks of the deadlines

// Transports
X(CONNECT_ALL, Int, "0", "1: connect to every peer at init; 0: to the peers the schedules name, to the others on first use")
XCHECK(CONNECT_ALL, "0..1")
X(SHM_DISABLE, Int, "0", "1: never use shared memory between same-host ranks (socket instead)")
XCHECK(SHM_DISABLE, "0..1")
X(SHM_SMALL_BYTES, Int, "4096", "collectives whose contribution per rank is at most this many bytes, and barriers, one host, 2-16 ranks: through one shared block, not the rings (0: never)")
XCHECK(SHM_SMALL_BYTES, "0..1048576")
X(SHM_BUFFER_SIZE, Int, "4194304", "bytes of each shared-memory ring (one per direction and peer)")
XCHECK(SHM_BUFFER_SIZE, "65536..1073741824")
X(SHM_DIRECT_BYTES, Int, "8192", "one host, 2-16 ranks: a collective (not alltoallv) moving at least this many bytes per rank reads and writes the peers' buffers in place when every buffer a peer touches is shareable (host ranks: deviceMalloc / flagcxMemAlloc memory; CUDA ranks in direct mode: device memory), else takes the rings (0: never; needs the shared block: FLAGCX_SHM_SMALL_BYTES >= 328)")
XCHECK(SHM_DIRECT_BYTES, "0..")
X(SHM_STREAM_BYTES, Int, "0", "shm: a send of at least this many bytes is written into the ring with non-temporal stores (0, the default: never; no faster on the machines measured, docs/DECISIONS.md)")
XCHECK(SHM_STREAM_BYTES, "0..")
X(IPC_DISABLE, Int, "0", "1: device buffers of same-host ranks go through host staging instead of CUDA IPC")
XCHECK(IPC_DISABLE, "0..1")
X(CUDA_STREAM_WAIT, Str, "handoff", "how engine work on a CUDA stream is ordered: handoff (the call returns once the stream's earlier work and the operation are done; always safe), value (cuStreamWaitValue32, asynchronous; can deadlock when CUDA puts a held stream and the engine's stream on one hardware queue), hostfunc")
XCHECK(CUDA_STREAM_WAIT, "handoff|value|hostfunc")
X(SHM_PULL, Int, "1", "1: same-host messages >= 64 KiB outside direct mode are read straight from the sender's buffer (process_vm_readv, where the peer may be read; else the ring); 0: always through the shm ring (docs/DECISIONS.md, \"Shared memory\")")
XCHECK(SHM_PULL, "0..1")
X(SOCKET_NTHREADS, Int, "-2", "socket transport: TCP connections (lanes) per peer connection set, times FLAGCX_NSOCKS_PERTHREAD; -2 (auto): 2-4 when FLAGCX_SOCKET_HELPERS is on, else 1")
XCHECK(SOCKET_NTHREADS, "1..16|-2")
X(NSOCKS_PERTHREAD, Int, "1", "socket transport: multiplies FLAGCX_SOCKET_NTHREADS's lanes (FlagCX's -2, auto, means 1)")
XCHECK(NSOCKS_PERTHREAD, "1..16|-2")
X(SOCKET_HELPERS, Int, "-2", "socket transport: each lane moves its stripes of messages split over several lanes with its own send and receive threads (1), or the engine thread polls every lane (0); -2 (auto): on when this process may use at least 4 cores per rank on its host")
XCHECK(SOCKET_HELPERS, "0..1|-2")
X(NET_CHUNK_SIZE, Int, "-2", "bytes of a pipeline slice for large messages; -2 (auto): 2 MiB to a peer over socket lanes with helper threads (FLAGCX_SOCKET_HELPERS), else 512 KiB")
XCHECK(NET_CHUNK_SIZE, "4096..1073741824|-2")
X(COPY_THREAD, Int, "-2", "a collective stage's host copies of >= 1 MiB that none of its messages needs are made by a thread of the communicator's own while the messages move (1), or by the engine thread between them (0); -2 (auto): on when this process may use at least 4 cores per rank on its host")
XCHECK(COPY_THREAD, "0..1|-2")
X(SOCKET_RECV_REDUCE, Int, "1", "socket lanes with helper threads: a collective's received bytes are reduced into their destination by the helper that receives them, piece by piece as they arrive (1), or by the engine thread once the whole slice is in (0)")
XCHECK(SOCKET_RECV_REDUCE, "0..1")
X(FUSE_COPIES, Int, "1", "host collectives: a copy that only sets up a later receive-and-reduce's destination is skipped and the received bytes are reduced with the copy's source straight into it, one pass instead of two (1), or the copy is made (0)")
XCHECK(FUSE_COPIES, "0..1")
X(STAGE_SLICE_SIZE, Int, "-2", "host staging of device buffers: bytes copied per step, each sent as soon as it is on the host; -2 (auto): chosen per call from the copy rate and the cost of one step measured at init (docs/GPU.md)")
XCHECK(STAGE_SLICE_SIZE, "4096..1073741824|-2")
X(STREAM_ASYNC_BYTES, Int, "0", "host staging of device buffers (opt-in, not yet run on a GPU): a call on a stream whose input and output each fit this many bytes returns at once, stream-ordered (its copies and a hold on the user's stream, the collective run on page-locked host slots by a worker thread; docs/GPU.md); 0 (default): such calls block like larger ones")
XCHECK(STREAM_ASYNC_BYTES, "0..1048576")
X(HOST_COPY_ENGINE_NS, Int, "0", "TESTS ONLY: > 0 runs a host rank as a staged device rank: its buffers go through host staging copies made by an emulated asynchronous copy engine, a thread that completes each copy in order after this many nanoseconds per KiB (0: off)")
XCHECK(HOST_COPY_ENGINE_NS, "0..1000000")
X(NCHANNELS, Int, "1", "parallel channels a collective is split across")
XCHECK(NCHANNELS, "1..16")
X(DETERMINISTIC, Int, "0", "1: every communicator's allreduce, reduce and reducescatter with Sum, Prod or Avg on a floating type give the rank-ordered left fold, bit for bit, on every path (docs/DETERMINISM.md); the same on every rank (init checks); flagcxCommSetDeterministic sets it per communicator")
XCHECK(DETERMINISTIC, "0..1")
X(NET, Str, "", "transport for network peers (other hosts; same host too with FLAGCX_SHM_DISABLE=1): IB (verbs; fail without an active RDMA port) or Socket; empty: verbs when every end has an active port, else sockets")
X(IB_HCA, Str, "", "RDMA devices and ports the verbs transport may use: name[:port],...; prefix match, = for exact names, ^ to exclude")
X(IB_GID_INDEX, Int, "0", "verbs: GID table index for RoCE ports (InfiniBand ports use the LID)")
X(IB_TIMEOUT, Int, "20", "verbs: queue pair local ACK timeout exponent (4.096 us * 2^value per try)")
X(IB_RETRY_CNT, Int, "7", "verbs: transport retries before a queue pair reports its peer unreachable")
X(IB_QPS_PER_CONNECTION, Int, "1", "verbs: queue pairs per connection; large messages are striped over them")
X(IB_SOFTWARE_DEVICE, Int, "0", "TESTS ONLY: 1 replaces the RDMA devices with a software device (shared memory, same host); 2 also carries same-host peers over it instead of shm")

// Algorithms and tuning
X(ALGO_PATH, Str, "", "folder of user algorithm scripts, searched before the shipped ones")
X(ALGO, Str, "", "force algorithms per op, e.g. allreduce:ring,alltoall:bruck")
X(TUNING_FILE, Str, "", "tuning rules YAML to load instead of the shipped config/tuning.yaml")
X(TUNING_POLICY, Str, "", "Lua policy file choosing algorithms; overrides the rules")
X(DATA_DIR, Str, "", "where the shipped algos/ and config/ live (default: found next to the library)")

// Heterogeneous communicators
X(USE_HETERO_COMM, Int, "0", "1: route every operation through the flagcx engine, even on homogeneous communicators")
XCHECK(USE_HETERO_COMM, "0..1")
X(CLUSTER_SPLIT_LIST, Str, "", "per device-kind cluster (in order of first rank), into how many sub-clusters of consecutive ranks to split it, e.g. 2 (FlagCX's meaning)")
X(NCCL_LIB, Str, "libnccl.so.2", "path or name of the NCCL library loaded at run time (under the NCCL drop-in: a path to NVIDIA's)")
X(NCCL_DROPIN_DIRECT, Int, "1", "NCCL drop-in: 1 calls NVIDIA's library directly on communicators flagcx passes whole to it; 0 goes through flagcx's API on every call")
XCHECK(NCCL_DROPIN_DIRECT, "0..1")

// Reliability
X(FLIGHT_RECORDER_SIZE, Int, "64", "operations kept in each communicator's flight recorder")
XCHECK(FLIGHT_RECORDER_SIZE, "1..1048576")
X(FLIGHT_RECORDER_FILE, Str, "", "file the flight recorder is dumped to on error; %r = rank")

// P2P engine
X(P2P_PORT, Int, "0", "listening port of a P2P engine (0: any)")
XCHECK(P2P_PORT, "0..65535")
X(P2P_SECRET, Str, "", "P2P engine: shared secret; engines connect only when theirs are equal (unset: each engine makes its own key, given to peers in GetMetadata's session; same-host peers of the same user need none)")
X(P2P_HANDSHAKE_TIMEOUT, Int, "5", "P2P engine: seconds a connection may take to connect and get through its handshake (either side), independent of FLAGCX_TIMEOUT")
XCHECK(P2P_HANDSHAKE_TIMEOUT, "1..600")
X(P2P_RECV_QUEUE_BYTES, Int, "67108864", "P2P engine: bytes of Send messages a connection may hold unreceived (Recv not yet called); a message past it is refused")
XCHECK(P2P_RECV_QUEUE_BYTES, "1..")
// Read into FlagcxP2pGlobalConfig (flagcx_p2p.h); FlagCX's defaults.
X(P2P_QPS_PER_CONN, Int, "4", "P2P engine: queue pairs per connection (here: TCP lanes each way)")
XCHECK(P2P_QPS_PER_CONN, "1..8")
X(P2P_WORKERS_PER_POOL, Int, "4", "P2P engine: workers per pool")
XCHECK(P2P_WORKERS_PER_POOL, "1..256")
X(P2P_SHARD_COUNT, Int, "8", "P2P engine: shards")
XCHECK(P2P_SHARD_COUNT, "1..256")
X(P2P_CQ_DEPTH, Int, "4096", "P2P engine: shared completion queue depth")
XCHECK(P2P_CQ_DEPTH, "1..")
X(P2P_MAX_WR_PER_POST, Int, "256", "P2P engine: work requests per post")
XCHECK(P2P_MAX_WR_PER_POST, "1..")
X(P2P_MAX_REQUESTS, Int, "256", "P2P engine: requests in flight")
XCHECK(P2P_MAX_REQUESTS, "1..")
X(P2P_BATCH_POLL_SIZE, Int, "64", "P2P engine: completions polled at once")
XCHECK(P2P_BATCH_POLL_SIZE, "1..")
X(P2P_SLICE_SIZE, Int, "1073741824", "P2P engine: bytes per slice of a transfer (large ones are also spread over the lanes)")
XCHECK(P2P_SLICE_SIZE, "1..")
X(P2P_IPC_BATCH_BYTES, Int, "0", "P2P engine: a same-host device vector (CUDA IPC) is copied in batches, the first of this many bytes, each next one twice as large up to 256 MiB (0, the default: one batch per transfer)")
XCHECK(P2P_IPC_BATCH_BYTES, "0..")
X(P2P_FRAGMENT_LIMIT, Int, "4096", "P2P engine: fragment limit in bytes")
XCHECK(P2P_FRAGMENT_LIMIT, "1..")
X(P2P_MAX_SGE, Int, "4", "P2P engine: scatter-gather entries per work request")
XCHECK(P2P_MAX_SGE, "1..")
X(P2P_MAX_INLINE, Int, "64", "P2P engine: inline bytes")
XCHECK(P2P_MAX_INLINE, "0..")
X(P2P_IB_PORT, Int, "1", "P2P engine: IB port")
XCHECK(P2P_IB_PORT, "1..255")
X(P2P_GID_INDEX, Int, "-1", "P2P engine: GID index (-1: auto)")
XCHECK(P2P_GID_INDEX, "-1..")
X(P2P_MTU, Int, "4096", "P2P engine: MTU bytes")
XCHECK(P2P_MTU, "256..4096")
X(P2P_IB_TC, Int, "-1", "P2P engine: IB traffic class (-1: off)")
XCHECK(P2P_IB_TC, "-1..255")
X(P2P_RETRY_CNT, Int, "7", "P2P engine: IB retry count")
XCHECK(P2P_RETRY_CNT, "0..7")
X(P2P_NOTIF_MAX_PEERS, Int, "64", "P2P engine: peers that may send notifications")
XCHECK(P2P_NOTIF_MAX_PEERS, "1..")
X(P2P_DEST_DEV_AFFINITY, Int, "0", "P2P engine: 1 to prefer the destination device's NIC")
XCHECK(P2P_DEST_DEV_AFFINITY, "0..1")


// FlagCX 0.13 variables with no effect here: DOC says why.
#define ACK_NET "the verbs transport (docs/RDMA.md) takes only FLAGCX_NET, FLAGCX_IB_HCA, _GID_INDEX, _TIMEOUT, _RETRY_CNT and _QPS_PER_CONNECTION; there is no UCX or Gloo transport"
#define ACK_TUNER "algorithms are chosen by config/tuning.yaml rules (FLAGCX_TUNING_FILE, FLAGCX_TUNING_POLICY, FLAGCX_ALGO), always on"
#define ACK_C2C "inter-cluster algorithms are Lua scripts chosen by the tuner (FLAGCX_ALGO, FLAGCX_ALGO_PATH)"
#define ACK_UNI "the engine's slicing is FLAGCX_NET_CHUNK_SIZE and FLAGCX_NCHANNELS; it launches no device kernels of its own"
#define ACK_DEVAPI "the device API (flagcx_kernel.h) and its FIFOs are not implemented yet"
#define ACK_RMA "one-sided operations are not implemented yet"
#define ACK_TOPO "flagcx detects no PCI/NIC topology: ranks are grouped by host and device kind"
#define ACK_PLUGIN "adapters are built in (FLAGCX_DEVICE picks one, FLAGCX_NCCL_LIB the NCCL library); no adaptor plugins are loaded"
X(WARN_ENABLE_DEBUG_INFO, Ack, "", "every WARN already names rank, peer and operation")
X(SET_THREAD_NAME, Ack, "", "threads keep their default names")
X(USE_HOST_COMM, Ack, "", "host-memory communication is the host adapter: FLAGCX_DEVICE=host")
X(NET_BUFFER_SIZE, Ack, "", "the socket transport stages nothing; slices are FLAGCX_NET_CHUNK_SIZE")
X(P2P_BUFFER_SIZE, Ack, "", "same-host transfers go through the shm ring: FLAGCX_SHM_BUFFER_SIZE")
X(P2P_CHUNK_SIZE, Ack, "", "same-host transfers go through the shm ring: FLAGCX_SHM_BUFFER_SIZE, FLAGCX_NET_CHUNK_SIZE")
X(SEMAPHORE_BUFFER_POOL_CAPACITY, Ack, "", ACK_DEVAPI)
X(KERNEL_FIFO_CAPACITY, Ack, "", ACK_DEVAPI)
X(REDUCE_FIFO_CAPACITY, Ack, "", ACK_DEVAPI)
X(MEM_ENABLE, Ack, "", "flagcxMemAlloc always allocates through the device adapter")
X(DMABUF_ENABLE, Ack, "", "no transport here registers DMA-BUF memory")
X(RUNTIME_PROXY, Ack, "", "the engine has one progress path per stream kind (docs/ARCHITECTURE.md), no separate proxy mode")
X(PROGRESS_APPENDOP_FREQ, Ack, "", "the engine has no proxy op queue to append to")
X(P2P_DISABLE, Ack, "", "same-host device buffers: FLAGCX_IPC_DISABLE=1 turns CUDA IPC off")
X(P2P_SCHEDULE_DISABLE, Ack, "", "send/receive order comes from the compiled schedules")
X(DEVICE_FUNC_PATH, Ack, "", "reduce kernels are built into the library")
X(RMA_QUEUE_SIZE, Ack, "", ACK_RMA)
X(RMA_BATCH_MAX, Ack, "", ACK_RMA)
X(TOPO_FILE, Ack, "", ACK_TOPO)
X(TOPO_DUMP_FILE, Ack, "", ACK_TOPO)
X(INTERSERVER_ROUTE_FILE, Ack, "", ACK_TOPO)
X(TOPO_DETECTION_DISABLE, Ack, "", ACK_TOPO)
X(ENABLE_TOPO_DETECT, Ack, "", ACK_TOPO)
X(USE_TUNER, Ack, "", ACK_TUNER)
X(USE_COMM_TAG, Ack, "", ACK_TUNER)
X(TUNER_SEARCH_NLOOPS, Ack, "", ACK_TUNER)
X(TUNER_CONFIG_ID, Ack, "", ACK_TUNER)
X(TUNER_BEST_CONFIG_ID, Ack, "", ACK_TUNER)
X(TUNER_DONE, Ack, "", ACK_TUNER)
X(TUNE_FILE, Ack, "", ACK_TUNER)
X(TUNE_GROUP_IDX, Ack, "", ACK_TUNER)
X(TUNING_WITH_FLAGSCALE, Ack, "", ACK_TUNER)
X(C2C_ALGO, Ack, "", ACK_C2C)
X(C2C_ALGO_EXPORT_PATH, Ack, "", ACK_C2C)
X(C2C_ALGO_EXPORT_PREFIX, Ack, "", ACK_C2C)
X(C2C_ALGO_IMPORT_PATH, Ack, "", ACK_C2C)
X(C2C_ALGO_IMPORT_PREFIX, Ack, "", ACK_C2C)
X(C2C_SEARCH_GRANULARITY, Ack, "", ACK_C2C)
X(P2P_EVENT_POOL_SIZE, Ack, "", "events are made per stream by the device adapter, no pool")
X(UNIRUNNER_NSLICES, Ack, "", ACK_UNI)
X(UNIRUNNER_NTHREADS, Ack, "", ACK_UNI)
X(UNIRUNNER_NBLOCKS, Ack, "", ACK_UNI)
X(UNIRUNNER_USE_LOCRED, Ack, "", ACK_UNI)
X(UNIRUNNER_USE_RINGAG, Ack, "", ACK_UNI)
X(UNIRUNNER_USE_SLICEDAR, Ack, "", ACK_UNI)
X(UNIRUNNER_NREDSLICES, Ack, "", ACK_UNI)
X(UNIRUNNER_REDSLICESIZE, Ack, "", ACK_UNI)
X(IB_DISABLE, Ack, "", ACK_NET)
X(IB_ROCE_VERSION_NUM, Ack, "", ACK_NET)
X(IB_PKEY, Ack, "", ACK_NET)
X(IB_USE_INLINE, Ack, "", ACK_NET)
X(IB_SL, Ack, "", ACK_NET)
X(IB_TC, Ack, "", ACK_NET)
X(IB_AR_THRESHOLD, Ack, "", ACK_NET)
X(IB_PCI_RELAXED_ORDERING, Ack, "", ACK_NET)
X(IB_ADAPTIVE_ROUTING, Ack, "", ACK_NET)
X(IB_MERGE_VFS, Ack, "", ACK_NET)
X(IB_MERGE_NICS, Ack, "", ACK_NET)
X(IB_SPLIT_DATA_ON_QPS, Ack, "", ACK_NET)
X(IB_ADDR_FAMILY, Ack, "", ACK_NET)
X(IB_ADDR_RANGE, Ack, "", ACK_NET)
X(GDR_FLUSH_DISABLE, Ack, "", ACK_NET)
X(IBUC_SPLIT_DATA_ON_QPS, Ack, "", ACK_NET)
X(IB_RETRANS_ENABLE, Ack, "", ACK_NET)
X(IB_RETRANS_TIMEOUT, Ack, "", ACK_NET)
X(IB_RETRANS_MAX_RETRY, Ack, "", ACK_NET)
X(IB_RETRANS_ACK_INTERVAL, Ack, "", ACK_NET)
X(IB_MAX_OUTSTANDING, Ack, "", ACK_NET)
X(FORCE_NET_SOCKET, Ack, "", "between hosts the socket transport is the only one here, so it is always used")
X(UCX_DISABLE, Ack, "", ACK_NET)
X(UCX_TLS, Ack, "", ACK_NET)
X(UCX_CUDA_DISABLE, Ack, "", ACK_NET)
X(GLOO_IB_DISABLE, Ack, "", ACK_NET)
X(DEVICE_ADAPTOR_PLUGIN, Ack, "", ACK_PLUGIN)
X(NET_ADAPTOR_PLUGIN, Ack, "", ACK_PLUGIN)
X(CCL_ADAPTOR_PLUGIN, Ack, "", ACK_PLUGIN)
X(IGNORE_CPU_AFFINITY, Ack, "", "flagcx never sets CPU affinity")
#undef ACK_NET
#undef ACK_TUNER
#undef ACK_C2C
#undef ACK_UNI
#undef ACK_DEVAPI
#undef ACK_RMA
#undef ACK_TOPO
#undef ACK_PLUGIN
