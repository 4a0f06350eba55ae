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
    EXPECT_TRUE(!strcmp(pi.kind, "Int") || !strcmp(pi.kind, "Str")) << pi.name;
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
  setenv("FLAGCX_TIMEOUT", "-3", 1);
  paramsReload();
  EXPECT_EQ(paramInt(Param::TIMEOUT), -3);
  setenv("FLAGCX_SHM_BUFFER_SIZE", "8589934592", 1);  // > 32 bits
  paramsReload();
  EXPECT_EQ(paramInt(Param::SHM_BUFFER_SIZE), 8589934592LL);
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
