// The door of adapters/, what differs per device or vendor: the
// DeviceAdapter interface and the FLAGCX_DEVICE choice (device/adapter.h)
// and its stream holds (device/stream_hold.h), and the whole-collective
// vendor back end (ccl/ccl.h).  Outside adapters/
// include only this header (tools/layers.txt).
#pragma once
#include "adapters/ccl/ccl.h"
#include "adapters/device/adapter.h"
#include "adapters/device/stream_hold.h"
