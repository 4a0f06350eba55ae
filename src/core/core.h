// The door of src/core, the communicator (comm.h), its one-sided state
// (onesided.h) and its device communicators (devcomm.h).  Outside src/core include only this header
// (tools/layers.txt).
#pragma once
#include "core/comm.h"
#include "core/onesided.h"
#include "core/devcomm.h"
