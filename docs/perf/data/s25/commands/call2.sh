#!/usr/bin/env bash
# Session 25 call 2 (the same carried build as call 1): the whole CUDA suite again, its log packed (call 1's
# summary was among the files not returned).
O=$OUT/t; mkdir -p $O; source scripts/unpack-bin.sh; timeout 330 $BIN/dsv4_cuda_tests --gtest_output=json:$O/tests.json > $O/tests.txt 2>&1; echo "rc=$?"; grep -E "^\[  FAILED|^\[  PASSED|tests ran|Failure" $O/tests.txt | head -30; grep -E "^\[spec|^\[sample_rows|^\[split|argmax" $O/tests.txt | head -40; cd $OUT && tar czf t.tgz t && rm -rf t
