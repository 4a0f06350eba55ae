// flagcx-info: what this build and machine offer, and every FLAGCX_* variable.
//   flagcx-info            version, device adapter, network interface
//   flagcx-info --env      name, current value, default and doc of each variable
//   flagcx-info --compare-dumps FILES...   which rank diverged or stopped first
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "adapters/device/adapter.h"
#include "exec/flight.h"
#include "base/params.h"
#include "rendezvous/socket.h"
#include "flagcx.h"

using namespace flagcx;

static void printEnv() {
  printf("%-32s %-16s %-16s %s\n", "VARIABLE", "VALUE", "DEFAULT", "DESCRIPTION");
  for (size_t i = 0; i < paramCount(); i++) {
    Param p = static_cast<Param>(i);
    const ParamInfo &pi = paramInfo(p);
    std::string val = paramIsSet(p) ? paramStr(p) : "(default)";
    if ((p == Param::P2P_SECRET || p == Param::COMM_SECRET) && paramIsSet(p)) val = "(set, not shown)";
    const char *def = strcmp(pi.kind, "Ack") == 0 ? "(no effect)" : *pi.def ? pi.def : "\"\"";
    printf("%-32s %-16s %-16s %s\n", pi.name, val.c_str(), def, pi.doc);
  }
  std::string unknown = paramsUnknownNames();
  if (!unknown.empty()) printf("\nunknown FLAGCX_* variables set (ignored): %s\n", unknown.c_str());
}

static void printInfo() {
  int v = 0;
  flagcxGetVersion(&v);
  printf("flagcx, FlagCX API %d.%d.%d (README, \"Versions\")\n", v / 10000, (v / 100) % 100, v % 100);
  DeviceAdapter *dev = selectedAdapter();
  printf("device adapter : %s (FLAGCX_DEVICE=%s)\n", dev ? dev->name() : "none",
         paramStr(Param::DEVICE).c_str());
  SockAddr a;
  std::string ifname;
  if (findLocalAddress(&a, &ifname) == flagcxSuccess)
    printf("socket network : %s %s\n", ifname.c_str(), a.str().c_str());
  printf("transports     : shm (same host%s), socket\n",
         paramInt(Param::SHM_DISABLE) ? ", disabled by FLAGCX_SHM_DISABLE" : "");
  printf("variables      : %zu (flagcx-info --env lists them)\n", paramCount());
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--env") == 0) {
    printEnv();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--compare-dumps") == 0) {
    std::vector<std::string> files(argv + 2, argv + argc);
    bool ok = false;
    printf("%s", compareFlightDumps(files, &ok).c_str());
    return ok ? 0 : 2;
  }
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("usage: flagcx-info [--env | --compare-dumps FILES...]\n");
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "flagcx-info: unknown argument %s\nusage: flagcx-info [--env | --compare-dumps FILES...]\n", argv[1]);
    return 2;
  }
  printInfo();
  return 0;
}
