// Logging: level and subsystem parsing, file names, last error, log file lines,
// a log file that cannot be written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "base/log.h"
#include "base/params.h"
#include "tests/common/in_child.h"

using namespace flagcx;

namespace {
std::string shortHost() {
  char h[256] = {};
  gethostname(h, sizeof(h) - 1);
  std::string s(h);
  return s.substr(0, s.find('.'));
}

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char *n : {"FLAGCX_DEBUG", "FLAGCX_DEBUG_SUBSYS", "FLAGCX_DEBUG_FILE"}) unsetenv(n);
    paramsReload();
    logSetRank(-1);
  }
};
}  // namespace

TEST_F(LogTest, ParseLogLevel) {
  EXPECT_EQ(parseLogLevel("NONE"), LogLevel::None);
  EXPECT_EQ(parseLogLevel("VERSION"), LogLevel::Version);
  EXPECT_EQ(parseLogLevel("WARN"), LogLevel::Warn);
  EXPECT_EQ(parseLogLevel("INFO"), LogLevel::Info);
  EXPECT_EQ(parseLogLevel("TRACE"), LogLevel::Trace);
  EXPECT_EQ(parseLogLevel("info"), LogLevel::Info);
  EXPECT_EQ(parseLogLevel("bogus"), LogLevel::Warn);
  EXPECT_EQ(parseLogLevel(""), LogLevel::Warn);
}

TEST_F(LogTest, ParseSubsysMask) {
  EXPECT_EQ(parseSubsysMask("INIT"), static_cast<uint32_t>(kInit));
  EXPECT_EQ(parseSubsysMask("INIT,COLL,P2P"), static_cast<uint32_t>(kInit | kColl | kP2P));
  EXPECT_EQ(parseSubsysMask("net,shm"), static_cast<uint32_t>(kNet | kShm));
  EXPECT_EQ(parseSubsysMask("BOOTSTRAP,ENV"), static_cast<uint32_t>(kBootstrap | kEnv));
  EXPECT_EQ(parseSubsysMask("ALL"), static_cast<uint32_t>(kAll));
  EXPECT_EQ(parseSubsysMask("^NET"), ~static_cast<uint32_t>(kNet));
  EXPECT_EQ(parseSubsysMask("^INIT,ENV"), ~static_cast<uint32_t>(kInit | kEnv));
  EXPECT_EQ(parseSubsysMask("^ALL"), 0u);
  EXPECT_EQ(parseSubsysMask(""), 0u);
  EXPECT_EQ(parseSubsysMask("NOPE"), 0u);
}

TEST_F(LogTest, ExpandLogFileName) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string pid = std::to_string(getpid());
  EXPECT_EQ(expandLogFileName("/tmp/f.%h.%p.log"), std::string("/tmp/f.") + host + "." + pid + ".log");
  EXPECT_EQ(expandLogFileName("plain"), "plain");
  EXPECT_EQ(expandLogFileName("%p%p"), pid + pid);
  EXPECT_EQ(expandLogFileName("a%"), "a%");
  EXPECT_EQ(expandLogFileName("%x"), "%x");
}

TEST_F(LogTest, WarnSetsLastError) {
  WARN(kNet, "peer %d went away", 7);
  EXPECT_NE(std::string(lastErrorText()).find("peer 7 went away"), std::string::npos);
  // argError records the text even when WARN lines are filtered out.
  setenv("FLAGCX_DEBUG", "NONE", 1);
  paramsReload();
  EXPECT_EQ(argError(flagcxInvalidArgument, kInit, "arg %s is bad", "foo"), flagcxInvalidArgument);
  EXPECT_NE(std::string(lastErrorText()).find("arg foo is bad"), std::string::npos);
}

TEST_F(LogTest, EnabledFollowsLevelAndMask) {
  setenv("FLAGCX_DEBUG", "INFO", 1);
  setenv("FLAGCX_DEBUG_SUBSYS", "NET", 1);
  paramsReload();
  EXPECT_TRUE(logEnabled(LogLevel::Info, kNet));
  EXPECT_FALSE(logEnabled(LogLevel::Info, kColl));
  EXPECT_TRUE(logEnabled(LogLevel::Warn, kColl));  // warnings ignore the mask
  EXPECT_FALSE(logEnabled(LogLevel::Trace, kNet));
}

TEST_F(LogTest, DebugFileLines) {
  char dir[] = "/tmp/flagcx-logtest-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string pattern = std::string(dir) + "/log.%h.%p";
  setenv("FLAGCX_DEBUG", "INFO", 1);
  setenv("FLAGCX_DEBUG_SUBSYS", "NET,SHM", 1);
  setenv("FLAGCX_DEBUG_FILE", pattern.c_str(), 1);
  paramsReload();
  logSetRank(3);
  EXPECT_EQ(logRank(), 3);
  INFO(kNet, "hello from the net");
  INFO(kColl, "filtered out");
  WARN(kShm, "shm trouble");
  // Back to stderr; this closes (and flushes) the file.
  unsetenv("FLAGCX_DEBUG_FILE");
  paramsReload();

  std::string path = expandLogFileName(pattern);
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  std::string host = shortHost(), pid = std::to_string(getpid());
  int lines = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("hello from the net") == std::string::npos &&
        line.find("shm trouble") == std::string::npos)
      continue;
    lines++;
    EXPECT_EQ(line.rfind(host + ":" + pid + ":", 0), 0u) << line;
    EXPECT_NE(line.find("[3]"), std::string::npos) << line;
    bool net = line.find("hello") != std::string::npos;
    EXPECT_NE(line.find(net ? " NET " : " SHM "), std::string::npos) << line;
    EXPECT_NE(line.find(net ? " INFO " : " WARN "), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 2) << text;
  EXPECT_EQ(text.find("filtered out"), std::string::npos);
  unlink(path.c_str());
  rmdir(dir);
}

// A log file that cannot take lines (/dev/full, a folder, a path in a missing
// folder, a FIFO nobody reads): one warning on stderr, then every line on
// stderr.  Each case runs in a child whose stderr is a file (a FIFO that
// blocked the open would hang the child, not the runner).
TEST_F(LogTest, UnwritableFileWarnsOnceThenStderr) {
  char dir[] = "/tmp/flagcx-logtest-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string capture = std::string(dir) + "/stderr";
  for (const std::string &target :
       {std::string("/dev/full"), std::string(dir), std::string(dir) + "/missing/x.log", fifo}) {
    harness::ChildResult r = harness::inChild(
        [&] {
          int fd = open(capture.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
          dup2(fd, 2);
          close(fd);
          setenv("FLAGCX_DEBUG", "WARN", 1);
          setenv("FLAGCX_DEBUG_FILE", target.c_str(), 1);
          paramsReload();
          for (int i = 0; i < 3; i++) WARN(kNet, "line number %d", i);
          std::ifstream f(capture);
          std::stringstream ss;
          ss << f.rdbuf();
          return ss.str();
        },
        20);
    EXPECT_TRUE(r.clean) << target << ": the child " << r.how;
    int warnings = 0, lines = 0;
    std::istringstream in(r.text);
    for (std::string line; std::getline(in, line);) {
      warnings += line.find("FLAGCX_DEBUG_FILE=" + target + " (") != std::string::npos;
      lines += line.find("line number ") != std::string::npos;
    }
    EXPECT_EQ(warnings, 1) << target << ":\n" << r.text;
    EXPECT_EQ(lines, 3) << target << ":\n" << r.text;
  }
  unlink(fifo.c_str());
  unlink(capture.c_str());
  rmdir(dir);
}
