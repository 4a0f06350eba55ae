// The door of src/core, the communicator (comm.h) and its one-sided state
// (onesided.h).  Outside src/core include only this header
// (tools/layers.txt).
#pragma once
#include "core/comm.h"
#include "core/onesided.h"
