// The door of src/sched, algorithm scripts turned into schedules: the IR and
// its names (ir.h, ir_names.h), the script compiler (script.h), the verifier
// (verify.h), the registry (registry.h), the compiled set a communicator
// holds (algo_set.h) and the tuner (tuner.h).  Outside src/sched include
// only this header (tools/layers.txt).
#pragma once
#include "sched/algo_set.h"
#include "sched/ir.h"
#include "sched/ir_names.h"
#include "sched/registry.h"
#include "sched/script.h"
#include "sched/tuner.h"
#include "sched/verify.h"
