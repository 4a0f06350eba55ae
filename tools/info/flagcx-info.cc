// flagcx-info: what this build and machine offer, and every FLAGCX_* variable
// (kUsage below says what each option does).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "adapters/adapters.h"
#include "exec/exec.h"
#include "base/base.h"
#include "rendezvous/rendezvous.h"
#include "flagcx.h"
#include "tools/version_line.h"

using namespace flagcx;

namespace {

const char *kUsage =
    "usage: flagcx-info [OPTION]\n"
    "  (no option)            library version, FlagCX API level, the device adapter\n"
    "                         FLAGCX_DEVICE selects, the network interface the sockets\n"
    "                         use, the transports, the number of variables\n"
    "  --version              the library version and the FlagCX API level it implements\n"
    "  --env                  every FLAGCX_* variable: name, value in this environment,\n"
    "                         default and what it does; then unknown FLAGCX_* names set\n"
    "  --compare-dumps FILE.. read flight-recorder dumps of several ranks of one job\n"
    "                         (FLAGCX_FLIGHT_RECORDER_FILE) and name the rank(s) whose\n"
    "                         sequence of operations diverged or stopped first; exit 2\n"
    "                         when they disagree or a file cannot be read\n"
    "  -h, --help             this help\n"
    "Exit status: 0 on success, 2 on a bad command line or dumps that disagree.\n";

void printEnv() {
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

void printInfo() {
  printf("%s (README, \"Versions\")\n", flagcxVersionLine().c_str());
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

int badUsage(const std::string &why) {
  fprintf(stderr, "flagcx-info: %s\n%s", why.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  std::string opt = argc > 1 ? argv[1] : "";
  if (opt == "--compare-dumps") {
    if (argc < 3) return badUsage("--compare-dumps needs at least one FILE");
    std::vector<std::string> files(argv + 2, argv + argc);
    bool ok = false;
    printf("%s", compareFlightDumps(files, &ok).c_str());
    return ok ? 0 : 2;
  }
  if (argc > 2) return badUsage(opt + " takes no argument (got " + argv[2] + ")");
  if (opt == "-h" || opt == "--help") {
    fputs(kUsage, stdout);
  } else if (opt == "--version") {
    printf("%s\n", flagcxVersionLine().c_str());
  } else if (opt == "--env") {
    printEnv();
  } else if (opt.empty()) {
    printInfo();
  } else {
    return badUsage("unknown option " + opt);
  }
  return 0;
}
