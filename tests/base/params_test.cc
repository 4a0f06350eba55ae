// FLAGCX_* parameters: declaration table, parsing, reload, unknown names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "base/params.h"

using namespace flagcx;

namespace {
// Sets variables for one test and restores a clean environment afterwards.
class ParamsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char *n : {"FLAGCX_TIMEOUT", "FLAGCX_DEVICE", "FLAGCX_SHM_BUFFER_SIZE",
                          "FLAGCX_NET_CHUNK_SIZE", "FLAGCX_DEBUG", "FLAGCX_DEBUG_SUBSYS",
                          "FLAGCX_TIMEOUTT", "FLAGCX_NO_SUCH_THING"})
      unsetenv(n);
    paramsReload();
  }
};
}  // namespace

TEST_F(ParamsTest, TableIsWellFormed) {
  std::set<std::string> names;
  for (size_t i = 0; i < paramCount(); i++) {
    const ParamInfo &pi = paramInfo(static_cast<Param>(i));
    ASSERT_NE(pi.name, nullptr);
    EXPECT_EQ(strncmp(pi.name, "FLAGCX_", 7), 0) << pi.name;
    EXPECT_TRUE(names.insert(pi.name).second) << "duplicate " << pi.name;
    EXPECT_TRUE(!strcmp(pi.kind, "Int") || !strcmp(pi.kind, "Str") || !strcmp(pi.kind, "Ack"))
        << pi.name;
    EXPECT_GT(strlen(pi.doc), 0u) << pi.name;
    if (!strcmp(pi.kind, "Int")) {
      char *end;
      strtoll(pi.def, &end, 0);
      EXPECT_TRUE(*pi.def && *end == '\0') << pi.name << " default " << pi.def;
    }
  }
  EXPECT_STREQ(paramInfo(Param::TIMEOUT).name, "FLAGCX_TIMEOUT");
}

TEST_F(ParamsTest, Defaults) {
  unsetenv("FLAGCX_TIMEOUT");
  unsetenv("FLAGCX_DEVICE");
  paramsReload();
  EXPECT_EQ(paramInt(Param::TIMEOUT), 600);
  EXPECT_EQ(paramStr(Param::TIMEOUT), "600");
  EXPECT_FALSE(paramIsSet(Param::TIMEOUT));
  EXPECT_EQ(paramStr(Param::DEVICE), "auto");
  EXPECT_EQ(paramInt(Param::SHM_BUFFER_SIZE), 4194304);
}

TEST_F(ParamsTest, IntParsingAndReload) {
  setenv("FLAGCX_TIMEOUT", "42", 1);
  paramsReload();
  EXPECT_EQ(paramInt(Param::TIMEOUT), 42);
  EXPECT_TRUE(paramIsSet(Param::TIMEOUT));
  setenv("FLAGCX_TIMEOUT", "0x10", 1);
  paramsReload();
  EXPECT_EQ(paramInt(Param::TIMEOUT), 16);
  setenv("FLAGCX_SHM_BUFFER_SIZE", "1073741824", 1);  // > 16 bits, the largest allowed
  paramsReload();
  EXPECT_EQ(paramInt(Param::SHM_BUFFER_SIZE), 1073741824LL);
  setenv("FLAGCX_DEVICE", "host", 1);
  paramsReload();
  EXPECT_EQ(paramStr(Param::DEVICE), "host");
  EXPECT_TRUE(paramIsSet(Param::DEVICE));
}

TEST_F(ParamsTest, BadIntFallsBackToDefault) {
  for (const char *bad : {"12abc", "abc", "1.5", "99999999999999999999999"}) {
    setenv("FLAGCX_TIMEOUT", bad, 1);
    paramsReload();
    EXPECT_EQ(paramInt(Param::TIMEOUT), 600) << bad;
    EXPECT_EQ(paramStr(Param::TIMEOUT), "600") << bad;
  }
  setenv("FLAGCX_TIMEOUT", "", 1);  // empty: the default
  paramsReload();
  EXPECT_EQ(paramInt(Param::TIMEOUT), 600);
}

// A value outside what the variable accepts: the default is used, and one
// WARN names the variable, the value given and the value used.
TEST_F(ParamsTest, OutOfRangeValuesWarnAndUseTheDefault) {
  struct Case {
    const char *name, *given, *used;
    Param p;
  } cases[] = {{"FLAGCX_TIMEOUT", "-5", "600", Param::TIMEOUT},
               {"FLAGCX_TIMEOUT", "0", "600", Param::TIMEOUT},
               {"FLAGCX_NET_CHUNK_SIZE", "0", "-2", Param::NET_CHUNK_SIZE},
               {"FLAGCX_SHM_BUFFER_SIZE", "8589934592", "4194304", Param::SHM_BUFFER_SIZE},
               {"FLAGCX_DEBUG", "LOUD", "WARN", Param::DEBUG},
               {"FLAGCX_DEBUG_SUBSYS", "INIT,BOGUS", "INIT", Param::DEBUG_SUBSYS}};
  for (const Case &c : cases) {
    setenv(c.name, c.given, 1);
    paramsReload();
    EXPECT_EQ(paramStr(c.p), c.used) << c.name << "=" << c.given;
    int found = 0;
    for (const ParamNote &n : paramsNotes()) {
      if (n.text.find(c.name) == std::string::npos) continue;
      found++;
      EXPECT_TRUE(n.warn) << n.text;
      EXPECT_NE(n.text.find(c.given), std::string::npos) << n.text;
      EXPECT_NE(n.text.find(std::string("using ")), std::string::npos) << n.text;
      EXPECT_NE(n.text.find(c.used), std::string::npos) << n.text;
    }
    EXPECT_EQ(found, 1) << c.name << "=" << c.given;
    unsetenv(c.name);
  }
  setenv("FLAGCX_SOCKET_NTHREADS", "-2", 1);  // FlagCX's "auto" is accepted
  setenv("FLAGCX_DEBUG", "info", 1);  // any case
  setenv("FLAGCX_DEBUG_SUBSYS", "^GRAPH,NET", 1);  // FlagCX's names are accepted
  paramsReload();
  EXPECT_EQ(paramStr(Param::DEBUG), "info");
  EXPECT_EQ(paramStr(Param::DEBUG_SUBSYS), "^GRAPH,NET");
  EXPECT_EQ(paramInt(Param::SOCKET_NTHREADS), -2);
  EXPECT_TRUE(paramsNotes().empty());
  setenv("FLAGCX_SOCKET_NTHREADS", "-1", 1);
  paramsReload();
  EXPECT_EQ(paramInt(Param::SOCKET_NTHREADS), -2);  // the default: auto
  EXPECT_EQ(paramsNotes().size(), 1u);
  unsetenv("FLAGCX_SOCKET_NTHREADS");
  unsetenv("FLAGCX_DEBUG");
  unsetenv("FLAGCX_DEBUG_SUBSYS");
}

// FlagCX 0.13 variables with no effect here: known (no unknown-variable
// warning), and one INFO line each that says why.
TEST_F(ParamsTest, FlagcxVariablesAreAcknowledged) {
  for (const char *n : {"FLAGCX_USE_HOST_COMM", "FLAGCX_ENABLE_TOPO_DETECT", "FLAGCX_IB_PKEY",
                        "FLAGCX_UNIRUNNER_NSLICES", "FLAGCX_USE_TUNER", "FLAGCX_C2C_ALGO",
                        "FLAGCX_CCL_ADAPTOR_PLUGIN"})
    setenv(n, "1", 1);
  paramsReload();
  std::string u = paramsUnknownNames();
  for (const char *n : {"FLAGCX_USE_HOST_COMM", "FLAGCX_ENABLE_TOPO_DETECT", "FLAGCX_IB_PKEY",
                        "FLAGCX_UNIRUNNER_NSLICES", "FLAGCX_USE_TUNER", "FLAGCX_C2C_ALGO",
                        "FLAGCX_CCL_ADAPTOR_PLUGIN"}) {
    EXPECT_EQ(("," + u + ",").find(std::string(",") + n + ","), std::string::npos) << n;
    int found = 0;
    for (const ParamNote &note : paramsNotes())
      if (note.text.rfind(std::string(n) + "=", 0) == 0) {
        found++;
        EXPECT_FALSE(note.warn);
        EXPECT_NE(note.text.find("no effect"), std::string::npos) << note.text;
      }
    EXPECT_EQ(found, 1) << n;
    unsetenv(n);
  }
}

TEST_F(ParamsTest, UnknownNamesAreListed) {
  setenv("FLAGCX_TIMEOUTT", "5", 1);
  setenv("FLAGCX_NO_SUCH_THING", "1", 1);
  setenv("FLAGCX_TIMEOUT", "5", 1);
  std::string u = paramsUnknownNames();
  EXPECT_NE(u.find("FLAGCX_TIMEOUTT"), std::string::npos) << u;
  EXPECT_NE(u.find("FLAGCX_NO_SUCH_THING"), std::string::npos) << u;
  // Known names are never listed (match whole names, comma separated).
  std::string padded = "," + u + ",";
  EXPECT_EQ(padded.find(",FLAGCX_TIMEOUT,"), std::string::npos) << u;
  unsetenv("FLAGCX_TIMEOUTT");
  unsetenv("FLAGCX_NO_SUCH_THING");
  EXPECT_EQ(paramsUnknownNames().find("FLAGCX_NO_SUCH_THING"), std::string::npos);
}
