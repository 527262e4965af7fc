#include "metrics/progress.h"

#include <gtest/gtest.h>

#include <sstream>

namespace cumulus::metrics {
namespace {

TEST(ProgressTest, FormatsDurations) {
  EXPECT_EQ(Progress::formatDuration(0), "0:00");
  EXPECT_EQ(Progress::formatDuration(83.4), "1:23");
  EXPECT_EQ(Progress::formatDuration(3723), "1:02:03");
  EXPECT_EQ(Progress::formatDuration(-1), "?");
}

TEST(ProgressTest, PlainModePrintsEveryLogEverySteps) {
  std::ostringstream out;
  Progress progress(out, /*live=*/false, /*total_steps=*/100, /*epochs=*/2, /*log_every=*/50);
  for (int64_t s = 1; s <= 100; ++s) progress.update({s, s <= 50 ? 1 : 2, 0.5, 1000, s * 0.1});
  progress.line("done");
  EXPECT_EQ(out.str(),
            "epoch 1/2  step 1/100  loss 0.5000  1000 samples/s  ETA 0:10\n"
            "epoch 1/2  step 50/100  loss 0.5000  1000 samples/s  ETA 0:05\n"
            "epoch 2/2  step 100/100  loss 0.5000  1000 samples/s  ETA 0:00\n"
            "done\n");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
}

TEST(ProgressTest, LiveModeRedrawsOneLineAndClearsItForMessages) {
  std::ostringstream out;
  Progress progress(out, /*live=*/true, /*total_steps=*/3, /*epochs=*/1, /*log_every=*/50);
  progress.update({1, 1, 2.0, 10, 0.0});
  progress.update({2, 1, 1.0, 10, 0.01});  // within 0.1 s of the last draw: skipped
  progress.update({3, 1, 0.5, 10, 0.02});  // the last step is always drawn
  progress.line("eval");
  progress.finish();
  const std::string first = "epoch 1/1  step 1/3  loss 2.0000  10 samples/s  ETA 0:00";
  const std::string last = "epoch 1/1  step 3/3  loss 0.5000  10 samples/s  ETA 0:00";
  EXPECT_EQ(out.str(),
            "\r" + first + "\r" + last + "\r" + std::string(last.size(), ' ') + "\reval\n");
}

TEST(ProgressTest, QuietModePrintsOnlyWarningsAndPreemptions) {
  for (bool live : {false, true}) {
    std::ostringstream out;
    Progress progress(out, live, /*total_steps=*/4, /*epochs=*/1, /*log_every=*/1, /*quiet=*/true);
    progress.info("model: mlp");
    for (int64_t s = 1; s <= 4; ++s) progress.update({s, 1, 0.5, 1000, s * 0.2});
    progress.line("warning: checkpoint failed: disk full");
    progress.info("test accuracy 0.8829");
    progress.line("preempted at step 4, checkpoint /c/step-00000004");
    progress.finish();
    EXPECT_EQ(out.str(),
              "warning: checkpoint failed: disk full\n"
              "preempted at step 4, checkpoint /c/step-00000004\n")
        << (live ? "live" : "plain");
  }
}

TEST(ProgressTest, RankZeroOrLogAllRanksPrintsRoutineLines) {
  EXPECT_FALSE(Progress::quietFor(0, false));
  EXPECT_TRUE(Progress::quietFor(1, false));
  EXPECT_FALSE(Progress::quietFor(3, true));
}

TEST(ProgressTest, InfoIsALineWhenNotQuiet) {
  std::ostringstream out;
  Progress progress(out, /*live=*/false, /*total_steps=*/4, /*epochs=*/1, /*log_every=*/50);
  progress.info("model: mlp");
  progress.line("warning: w");
  EXPECT_EQ(out.str(), "model: mlp\nwarning: w\n");
}

}  // namespace
}  // namespace cumulus::metrics
