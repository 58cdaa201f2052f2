// The checkpoint loader's terminal progress line (runtime/load_progress.h): bytes, rate, time
// left and bar at the start, midway and at the end; redraws throttled; nothing when disabled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "runtime/load_progress.h"

namespace dsv4 {
namespace {

TEST(LoadProgress, LineShowsBytesRateEtaAndBar) {
    EXPECT_EQ(load_progress_line(0, 160'000'000'000ull, 0.0, 10),
              "[load] 0.00 / 160.00 GB  - GB/s  ETA -  [..........]");
    // 40 of 160 GB in 5 s: 8 GB/s, 120 GB left = 15 s, a quarter of the bar.
    EXPECT_EQ(load_progress_line(40'000'000'000ull, 160'000'000'000ull, 5.0, 8),
              "[load] 40.00 / 160.00 GB  8.00 GB/s  ETA 15 s  [##......]");
    EXPECT_EQ(load_progress_line(160'000'000'000ull, 160'000'000'000ull, 20.0, 4),
              "[load] 160.00 / 160.00 GB  8.00 GB/s  ETA 0 s  [####]");
}

TEST(LoadProgress, RedrawsInPlaceAndEndsWithANewline) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    {
        LoadProgress p(1000, true, f, 3600.0);  // one redraw per hour: only the first and the final
        p.update(10);
        p.update(500);
        p.update(900);
        p.finish();
        p.finish();  // a second finish prints nothing
    }
    LoadProgress off(1000, false, f);
    off.update(5);
    off.finish();
    std::rewind(f);
    std::string text;
    for (int c; (c = std::fgetc(f)) != EOF;) text += char(c);
    std::fclose(f);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 2) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_NE(text.find("0.00 / 0.00 GB"), std::string::npos) << text;  // 1000 B = 0.00 GB
}

}  // namespace
}  // namespace dsv4
