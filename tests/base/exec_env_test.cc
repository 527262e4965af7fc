#include "base/exec_env.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace cumulus::base {
namespace {

std::vector<std::string> entries(char** list) {
  std::vector<std::string> out;
  for (char** p = list; *p != nullptr; ++p) out.emplace_back(*p);
  return out;
}

int count(const std::vector<std::string>& list, const std::string& prefix) {
  int n = 0;
  for (const auto& entry : list) n += entry.rfind(prefix, 0) == 0;
  return n;
}

TEST(ExecArgs, AppliesEachChangeToThisProcesssEnvironment) {
  ::setenv("CUMULUS_EXEC_TEST_KEEP", "kept", 1);
  ::setenv("CUMULUS_EXEC_TEST_REPLACE", "old", 1);
  ::setenv("CUMULUS_EXEC_TEST_DROP", "gone", 1);
  ExecArgs exec({"/bin/true", "a b"}, {{"CUMULUS_EXEC_TEST_REPLACE", "new"},
                                       {"CUMULUS_EXEC_TEST_DROP", std::nullopt},
                                       {"CUMULUS_EXEC_TEST_ADDED", "x=y"},
                                       {"CUMULUS_EXEC_TEST_ADDED", "last wins"}});
  const std::vector<std::string> env = entries(exec.envp());
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_KEEP=kept"), 1);
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_REPLACE="), 1);
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_REPLACE=new"), 1);
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_DROP="), 0);
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_ADDED="), 1);
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_ADDED=last wins"), 1);
  // A name that only begins like another is not touched.
  EXPECT_EQ(count(env, "CUMULUS_EXEC_TEST_KEEP"), 1);
  EXPECT_EQ(entries(exec.argv()), (std::vector<std::string>{"/bin/true", "a b"}));
  EXPECT_STREQ(exec.program(), "/bin/true");
  // This process's own environment is unchanged.
  EXPECT_STREQ(std::getenv("CUMULUS_EXEC_TEST_REPLACE"), "old");
  EXPECT_STREQ(std::getenv("CUMULUS_EXEC_TEST_DROP"), "gone");
}

// The arrays serve an execve() in a forked child, which calls nothing else.
TEST(ExecArgs, AChildExecsWithTheBuiltEnvironment) {
  ExecArgs exec({"/bin/sh", "-c", "printf %s \"$CUMULUS_EXEC_TEST_SEEN\""},
                {{"CUMULUS_EXEC_TEST_SEEN", "seen by the child"}});
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::execve(exec.program(), exec.argv(), exec.envp());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(out, "seen by the child");
}

}  // namespace
}  // namespace cumulus::base
