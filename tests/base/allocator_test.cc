#include "cumulus/allocator.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "cumulus/errors.h"

namespace cumulus {
namespace {

// Sets an environment variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(TrainingAllocator, AnUnknownChoiceNamesTheAllowedOnes) {
  ScopedEnv malloc_choice("CUMULUS_MALLOC", "jemalloc");
  try {
    useTrainingAllocator();
    FAIL() << "accepted";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "CUMULUS_MALLOC=jemalloc: expected training (the default) or default");
  }
}

TEST(TrainingAllocator, DefaultAndTunablesLeaveGlibcAlone) {
  {
    ScopedEnv malloc_choice("CUMULUS_MALLOC", "default");
    const AllocatorChoice choice = useTrainingAllocator();
    EXPECT_FALSE(choice.tuned);
    EXPECT_EQ(choice.text, "malloc: glibc's own thresholds (CUMULUS_MALLOC=default)");
  }
  ScopedEnv malloc_choice("CUMULUS_MALLOC", nullptr);
  ScopedEnv tunables("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536");
  const AllocatorChoice choice = useTrainingAllocator();
  EXPECT_FALSE(choice.tuned);
  EXPECT_EQ(choice.text, "malloc: as GLIBC_TUNABLES sets it");
}

// Once tuned, a block of several MB comes from the heap (no mapping of its own) and its memory is
// reused after a free: the same address, no new mapping.
TEST(TrainingAllocator, LargeBlocksStayInTheHeapAndAreReused) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer replaces malloc: glibc's thresholds do not apply";
#endif
  ScopedEnv malloc_choice("CUMULUS_MALLOC", nullptr);
  ScopedEnv tunables("GLIBC_TUNABLES", nullptr);
  const AllocatorChoice choice = useTrainingAllocator();
  ASSERT_TRUE(choice.tuned) << choice.text;
  const size_t mapped_before = mallinfo2().hblkhd;
  constexpr size_t kBlock = 24u << 20;  // above glibc's own threshold at any point (<= 32 MiB)
  void* first = std::malloc(kBlock);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "a 24 MiB block got a mapping of its own";
  std::free(first);
  void* second = std::malloc(kBlock);
  EXPECT_EQ(second, first);
  std::free(second);
}

}  // namespace
}  // namespace cumulus
