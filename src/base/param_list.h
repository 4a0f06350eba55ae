// Every FLAGCX_* variable, declared once: X(NAME, KIND, DEFAULT, DOC).
// KIND is Int or Str.  NAME is given without the FLAGCX_ prefix.
// This is the only place a variable is declared; `flagcx-info --env` lists
// them all, and an unknown FLAGCX_* name in the environment draws a warning.
// Keep it sorted by area; add new variables here, never getenv() elsewhere.

// Logging
X(DEBUG, Str, "WARN", "log level: NONE, VERSION, WARN, INFO or TRACE")
X(DEBUG_SUBSYS, Str, "INIT,ENV", "subsystems logged at INFO/TRACE: INIT,COLL,P2P,NET,SHM,BOOTSTRAP,ENV,TUNING,ALLOC,ALL; ^ negates")
X(DEBUG_FILE, Str, "", "write the log to this file instead of stderr; %h = host, %p = pid")

// Devices
X(DEVICE, Str, "auto", "device adapter: auto, host or cuda")

// Bootstrap
X(COMM_ID, Str, "", "host:port of the root; every rank derives the same unique id from it")
X(SOCKET_IFNAME, Str, "", "network interfaces to use: prefix match, ^ to exclude, = for exact names")
X(SOCKET_FAMILY, Str, "", "address family of the interface: AF_INET or AF_INET6 (empty: either)")
X(HOSTID, Str, "", "host identity override (ranks with equal ids share a host)")
X(TIMEOUT, Int, "600", "seconds any blocking wait may last before it fails")

// Transports
X(SHM_DISABLE, Int, "0", "1: never use shared memory between same-host ranks (socket instead)")
X(SHM_BUFFER_SIZE, Int, "4194304", "bytes of each shared-memory ring (one per direction and peer)")
X(IPC_DISABLE, Int, "0", "1: device buffers of same-host ranks go through host staging instead of CUDA IPC")
X(SHM_PULL, Int, "0", "0: same-host messages always go through the shm ring (faster, see docs/PERFORMANCE.md); 1: messages >= 64 KiB are read straight from the sender's buffer (process_vm_readv)")
X(SOCKET_NTHREADS, Int, "1", "socket transport: progress threads per peer connection set")
X(NSOCKS_PERTHREAD, Int, "1", "socket transport: TCP connections per progress thread")
X(NET_CHUNK_SIZE, Int, "524288", "bytes of a pipeline slice for large messages")
X(STAGE_SLICE_SIZE, Int, "1048576", "host staging of device buffers: bytes copied per step, each sent as soon as it is on the host")
X(NCHANNELS, Int, "1", "parallel channels a collective is split across")
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
X(CLUSTER_SPLIT_LIST, Str, "", "split consecutive ranks into clusters of these sizes, e.g. 2,2 (default: by device kind)")
X(NCCL_LIB, Str, "libnccl.so.2", "path or name of the NCCL library loaded at run time")

// Reliability
X(FLIGHT_RECORDER_SIZE, Int, "64", "operations kept in each communicator's flight recorder")
X(FLIGHT_RECORDER_FILE, Str, "", "file the flight recorder is dumped to on error; %r = rank")

// P2P engine
X(P2P_PORT, Int, "0", "listening port of a P2P engine (0: any)")
