// The door of src/base, the foundation every layer stands on: logging and the
// last error (log.h), the FLAGCX_* variables (params.h, declared once in
// param_list.h), waits and the FLAGCX_TIMEOUT deadline (backoff.h), data
// type names and sizes (dtype.h), operation kinds and CollArgs (ops.h), the
// data path's host copies (copy.h), user files read whole (config_file.h),
// PID namespaces (proc_ns.h) and whether a process is gone (proc_alive.h),
// which sanitizer is on (sanitizers.h), shareable host memory and its IPC
// handles (shared_mem.h, host_memory.h) and POSIX shared-memory segments
// (segment.h).  Outside src/base include only this header (tools/layers.txt).
#pragma once
#include "base/backoff.h"
#include "base/config_file.h"
#include "base/copy.h"
#include "base/dtype.h"
#include "base/host_memory.h"
#include "base/log.h"
#include "base/ops.h"
#include "base/params.h"
#include "base/proc_alive.h"
#include "base/proc_ns.h"
#include "base/sanitizers.h"
#include "base/segment.h"
#include "base/shared_mem.h"
