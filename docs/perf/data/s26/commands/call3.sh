#!/usr/bin/env bash
# Session 26, GPU call 3: call 2's served part again. Two speculating 8-layer servers did not fit one
# H100 (call 2: out of memory at start-up, and the first server left running spoiled part b), so
# part a (spec_graphs on vs off, both speculating) runs 6-layer servers and every server is stopped
# before the next part.
ROOT=$OUT; D=$ROOT/s26; mkdir -p "$D"/a "$D"/b
OUT=$D/a SWEEP_PHASES=spec SPEC_LAYERS=6 SPEC_TEMPS=0 SPEC_CONC=1,8,32 \
    SPEC_B_ARGS="--speculative-tokens 2 --speculative-max-batch 0 --option spec_graphs=0" \
    scripts/device-all.sh sweep 2>&1 | grep -E "^ +[0-9]+ +[0-9]|dsv4_spec|rc=|did not start" | head -20
pkill -f "dsv4 serve"; sleep 3
OUT=$D/b SWEEP_PHASES=spec SPEC_TEMPS=0 SPEC_CONC=1,4,8,16,32 scripts/device-all.sh sweep 2>&1 \
    | grep -E "^ +[0-9]+ +[0-9]|dsv4_spec|rc=|did not start" | head -20
pkill -f "dsv4 serve"
cd "$ROOT" && tar czf s26.tgz s26 && rm -rf s26
