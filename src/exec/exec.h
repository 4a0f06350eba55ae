// The door of src/exec, the executor: the Executor the communicator owns
// (executor.h) and the flight recorder whose dumps flagcx-info compares
// (flight.h).  Outside src/exec include only this header (tools/layers.txt).
#pragma once
#include "exec/executor.h"
#include "exec/flight.h"
