// The speculative-decoding area of one sequence's state (KvLayout::spec_tokens > 0, issue 24): what
// lets a runner undo the positions of a verify chunk whose drafts were rejected, and feed the MTP
// block the inputs it has not consumed yet. It lives in the state area, so it travels with the
// sequence's pages (preemption resets it, prefix-cache snapshots copy it) and the runner keeps no
// per-sequence memory of its own.
//
// Header (four int32 words): [verify start V0, verify length n, pending start A, pending length m].
// - Verify: before a verify chunk runs at positions [V0, V0 + n), spec_backup saves what those
//   positions overwrite in the decoder blocks: their window-ring slots, their compressor slot rows
//   (kv and gate) and, for overlapping (CSA) compressors, the previous-window rows that a window
//   close moves. With n <= every compress ratio and <= the window, each slot belongs to one position
//   of the chunk and a chunk closes at most one window per compressor. The next chunk of the
//   sequence starts at the first position the engine kept, F in [V0, V0 + n]; spec_rollback then
//   restores the slots of positions [F, V0 + n) and, when the close fell at a rejected position, the
//   previous-window rows. Accepted positions' writes stay. Compressed rows in token pages need no
//   restore: a row from a window that closed at a rejected position is read only by queries at or
//   after that position and is written again when the window closes for real (ref_speculative.h
//   states the same contract for the whole-state snapshot of the reference algorithm).
// - Pending: the MTP block at position p reads the main model's final streams at p and the token at
//   p + 1, so the last position of every chunk (all n positions of a verify chunk, until acceptance
//   is known) waits for the next chunk: its token (pending tokens) and streams (pending streams) are
//   kept at [A, A + m), always ending where the next chunk starts.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include <vector>

#include "model/kv_layout.h"
#include "model/spec_regions.h"

namespace dsv4 {

struct SpecHeader {
    int32_t verify_start = 0, verify_len = 0;    // the last verify chunk not yet resolved (len 0: none)
    int32_t pending_start = 0, pending_len = 0;  // positions whose MTP step waits for the next token
};

// The rows a verify chunk overwrites in a state area laid out by L (spec_regions.h): every decoder
// block's window ring, then every compressor's kv and gate rows (empty when L.spec_tokens is 0). The
// backup of region i sits where spec_backup puts it; the device form of both functions below walks the
// same list (kernels/cuda/ops/spec_state.cu).
std::vector<SpecRegion> spec_regions(const KvLayout& L);

// Reads / writes the header of a state area laid out by L (L.spec_tokens > 0; f32 elements).
SpecHeader spec_header(const KvLayout& L, const float* state);
void set_spec_header(const KvLayout& L, float* state, const SpecHeader& h);

// Saves what a verify chunk at positions [start, start + n) overwrites (n <= L.spec_tokens + 1) and
// records the chunk in the header. Call before the chunk runs.
void spec_backup(const KvLayout& L, float* state, int64_t start, int64_t n);

// Undoes positions [from, V0 + n) of the recorded verify chunk (nothing when from >= V0 + n), clears
// the record and drops pending positions >= from. No record: nothing to do. Errors: from < V0
// (kFailedPrecondition: a chunk may not start inside the positions before the verify chunk).
Status spec_rollback(const KvLayout& L, float* state, int64_t from);

// Pending position i's token (stored as an f32 value: ids below 2^24 are exact) and streams
// [m, hc_mult * hidden] (a view into the state area).
int32_t spec_pending_token(const KvLayout& L, const float* state, int64_t i);
void set_spec_pending_token(const KvLayout& L, float* state, int64_t i, int32_t token);
std::span<float> spec_pending_streams(const KvLayout& L, float* state, int64_t m, int64_t stream_elems);

}  // namespace dsv4
