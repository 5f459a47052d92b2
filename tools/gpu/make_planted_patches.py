#!/usr/bin/env python3
"""Writes tools/gpu/planted/*.patch and campaign.tsv: the GPU planted-bug campaign (docs/hardening.md).

Each entry plants one bug in a CUDA policy file or kernel family as an exact one-line replacement, so
a patch that no longer applies fails here by name instead of silently planting nothing. Columns of
campaign.tsv: patch, family, the bug, the gtest filter tools/gpu/run-planted.sh runs against the
planted binary (the tests that should catch it and the older ones that should not), the tests
expected to fail. Run from anywhere: python3 tools/gpu/make_planted_patches.py
"""
import difflib
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
out = os.path.join(root, 'tools/gpu/planted')
P = []  # (name, family, description, filter, expected, [(path, old, new)])
FAMILY = {}
FILTER = {}
def plant(name, what, expect, edits):
    P.append((name, what, expect, edits))

plant('random_pp-stream-heads-4-up', "random_pp's CUDA selection draws KV heads 4 and up from the next head's stream",
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/random_pp, Shapes/CudaEngineRealShape.*/qwen3_4b',
      [('src/policy/cuda/random_pp.cu',
        'cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head), keep);',
        'cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head >= 4 ? h.kv_head + 1 : h.kv_head), keep);')])
plant('random-stream-heads-8-up', "random's CUDA selection reuses the streams of KV heads 0-1 for heads 8-9",
      'Policies/CudaRealShape.Phi4KeepsWhatTheCpuKeeps/random',
      [('src/policy/cuda/random_pp.cu',
        'cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head), keep);',
        'cuda::keep_random_subset_device(h, static_cast<uint32_t>(h.kv_head >= 8 ? h.kv_head - 8 : h.kv_head), keep);')])
plant('random_shared-head-7', 'random_shared draws KV head 7 from another stream than the shared one',
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/random_shared',
      [('src/policy/cuda/random_shared.cu',
        'cuda::keep_random_subset_device(h, kSharedHeadStream, keep);',
        'cuda::keep_random_subset_device(h, h.kv_head == 7 ? kSharedHeadStream - 1 : kSharedHeadStream, keep);')])
plant('random_subset-victims-past-512', 'the random-subset resolver evicts at most 512 victims a head (a long prompt has more)',
      'Policies/CudaRealShape.*/random',
      [('src/policy/cuda/random_subset.cuh',
        '  for (int i = threadIdx.x; i < victims; i += blockDim.x) {',
        '  for (int i = threadIdx.x; i < (victims < 512 ? victims : 512); i += blockDim.x) {')])
plant('recency-order-positions-past-4095', 'the recency order keys on the low 12 bits of the position',
      'Policies/CudaRealShape.*/recency',
      [('src/policy/cuda/recency_order.cuh',
        'const uint32_t ordered = static_cast<uint32_t>(h.position(slot)) ^ 0x80000000u;',
        'const uint32_t ordered = static_cast<uint32_t>(h.position(slot) & 0xfff) ^ 0x80000000u;')])
plant('streaming-sinks-heads-2-up', 'streaming keeps 3 sink tokens instead of 4 on KV heads 2 and up',
      'Policies/CudaRealShape.*/streaming',
      [('src/policy/cuda/streaming.cu',
        '    const int sinks = kSinkTokens < h.keep ? kSinkTokens : h.keep;',
        '    const int sink_tokens = h.kv_head < 2 ? kSinkTokens : kSinkTokens - 1;\n    const int sinks = sink_tokens < h.keep ? sink_tokens : h.keep;')])
plant('recency_pp-protection-heads-4-up', 'recency_pp protects one prompt slot too few on KV heads 4 and up',
      'Policies/CudaRealShape.*/recency_pp',
      [('src/policy/cuda/recency.cu',
        '    for (int slot = threadIdx.x; slot < h.n_protected; slot += blockDim.x) keep[slot] = 1;\n',
        '    const int pinned = h.kv_head >= 4 && h.n_protected > 0 ? h.n_protected - 1 : h.n_protected;\n'
        '    for (int slot = threadIdx.x; slot < pinned; slot += blockDim.x) keep[slot] = 1;\n')])
plant('age-order-bitmap-words-past-256', "the age order from a bitmap of the positions' span counts the set bits before a word only within its chunk of 256 words (spans past 8,192 positions rank wrong)",
      'Policies/CudaScoringPolicy.SmallShapesKeepWhatTheCpuKeeps/* (the row whose positions spread past 8,192)',
      [('src/policy/cuda/scoring.cuh',
        '      running += set_total;',
        '      running = 0;')])
plant('age-order-bitmap-own-bit', "the age order from a bitmap counts a candidate's own bit among those below it (every rank one too high)",
      'Policies/CudaScoringPolicy.*, Policies/CudaRealShape.*/snapkv',
      [('src/policy/cuda/scoring.cuh',
        '        const uint32_t below = bits[off / 32] & ((1u << (off % 32)) - 1u);  // older, in its word',
        '        const uint32_t below = bits[off / 32] & ((2u << (off % 32)) - 1u);  // older, in its word')])
plant('take-first-pairs-one-tie-more', "the top-r selection without a sort (scoring.cuh's take_first_pairs) takes one pair more of those tied at the r-th key",
      'Policies/CudaEvict.RoundsMatchTheCpuBitForBit/random_block_pp*, Policies/CudaRealShape.*/{random_block_pp,snapkv_pp}',
      [('src/policy/cuda/scoring.cuh',
        '    if (i < len && (key < prefix || (tie && ties_before + tie_rank < rank))) take(v[i].index);',
        '    if (i < len && (key < prefix || (tie && ties_before + tie_rank <= rank))) take(v[i].index);')])
plant('random_block_pp-stream-heads-4-up', 'random_block_pp draws KV heads 4-7 from the streams of heads 0-3',
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/random_block_pp',
      [('src/policy/cuda/random_block_pp.cu',
        'const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};',
        'const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head & 3)};')])
plant('random_pp_rec-stream-heads-5-up', "the random rest (random_pp_rec's draw, shared with carrier_mix and "
      'random_vrange_pp) takes KV heads 5 and up from the streams of heads 0-4',
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/random_pp_rec',
      [('src/policy/cuda/random_subset.cuh',
        'const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};',
        'const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head % 5)};')])
plant('window-attention-group-past-4', 'the windowed attention (snapkv, vase) sums only the first 4 query heads of a GQA group',
      'Policies/CudaRealShape.DefaultModelKeepsWhatTheCpuKeeps/snapkv (groups of 7)',
      [('src/policy/cuda/window_attention.cuh',
        '  for (int gh = 0; gh < group; ++gh) {',
        '  for (int gh = 0; gh < (group < 4 ? group : 4); ++gh) {')])
plant('h2o-mass-heads-4-up', "H2O reads KV heads 4 and up's attention mass from head - 4",
      'Policies/CudaRealShape.*/h2o',
      [('src/policy/cuda/h2o_select.cuh',
        '      w.b[a] = static_cast<double>(mass[pool_index(h, w.slot_of_age[a])]);',
        '      w.b[a] = static_cast<double>(mass[pool_index(h, w.slot_of_age[a]) - (h.kv_head >= 4 ? 4 * h.page_slots : 0)]);')])
plant('vase-stream-heads-4-up', "VaSE's weighted draw uses KV head % 4 as its stream",
      'Policies/CudaRealShape.*/vase',
      [('src/policy/cuda/vase_select.cuh',
        '  const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head)};',
        '  const PhiloxStream stream{h.key, h.round, static_cast<uint32_t>(h.layer), static_cast<uint32_t>(h.kv_head % 4)};')])
plant('vase-tree-root-stale', "VaSE's draws leave the sum tree's root (the total weight left) as it was before each pick",
      'Policies/CudaRealShape.*/vase',
      [('src/policy/cuda/vase_select.cuh',
        '        for (int l = 0; l < kTreeLevels; ++l) tree[leaf >> l] = path[l] - weight;',
        '        for (int l = 0; l < kTreeLevels - 1; ++l) tree[leaf >> l] = path[l] - weight;')])
plant('vase-walk-run-tail', "VaSE's draws read the last entry of each run as weighing nothing (it is never picked by weight)",
      'Policies/CudaRealShape.*/vase',
      [('src/policy/cuda/vase_select.cuh',
        '              const unsigned long long entry = j0 + e < run_end ? pool[j0 + e] : kTakenBit;',
        '              const unsigned long long entry = j0 + e < run_end - 1 ? pool[j0 + e] : kTakenBit;')])
plant('vase-zero-weight-newest', "VaSE's draws past the last weight read the taken flags from the wrong end of the pool (a taken candidate can be picked again)",
      'Policies/CudaScoringPolicy.SmallShapesKeepWhatTheCpuKeeps/* (temperature=0.001)',
      [('src/policy/cuda/vase_select.cuh',
        '          while (oldest_left < m && (pool[oldest_left] & kTakenBit)) ++oldest_left;',
        '          while (oldest_left < m && (pool[m - 1 - oldest_left] & kTakenBit)) ++oldest_left;')])
plant('vase-draw-words-reused', "VaSE's draws reuse the first 32 random words in every batch of 32 draws",
      'Policies/CudaRealShape.*/vase',
      [('src/policy/cuda/vase_select.cuh',
        '    words[lane] = stream.draw_u64(static_cast<uint32_t>(draw0 + lane));',
        '    words[lane] = stream.draw_u64(static_cast<uint32_t>(lane));')])
plant('vase-descent-right-grandchild', "VaSE's draws read the wrong grandchild's sum where the descent goes right",
      'Policies/CudaScoringPolicy.* and Policies/CudaRealShape.*/vase',
      [('src/policy/cuda/vase_select.cuh',
        '                                     right_left = tree[4 * node + 2];',
        '                                     right_left = tree[4 * node + 1];')])
plant('vase-keep-flags-first-lap', "VaSE's draws write the keep flags of the taken entries among the pool's first 32 only",
      'Policies/CudaScoringPolicy.* and Policies/CudaRealShape.*/vase',
      [('src/policy/cuda/vase_select.cuh',
        '  for (int j = lane; j < m; j += 32)\n    if (pool[j] & kTakenBit)',
        '  for (int j = lane; j < min(m, 32); j += 32)\n    if (pool[j] & kTakenBit)')])
plant('mma-tile-chunks-past-8', "the tensor-core tiles (rkv_official's spare search) leave the odd 16-byte chunks past the 8th of a row uncopied (head_dim 128)",
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/rkv_official',
      [('src/policy/cuda/mma_tile.cuh',
        '  for (int c = half; c < d / 8; c += 2) cuda_ptx::cp_async_16(to + 16 * c, valid ? from + 8 * c : any, valid);',
        '  for (int c = half; c < (half ? min(d / 8, 8) : d / 8); c += 2) cuda_ptx::cp_async_16(to + 16 * c, valid ? from + 8 * c : any, valid);')])
plant('rkv-redundancy-first-64-channels', "R-KV's key redundancy (its second launch) reads only the first 64 channels of each key",
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/rkv',
      [('src/policy/cuda/rkv.cu',
        '    const double inv = a < end ? w.c[a] : 0.0;',
        '    const double inv = a < end && threadIdx.x % 16 < 8 ? w.c[a] : 0.0;  // lanes 0-7 of a row at d = 128')])
plant('rkv-redundancy-shares-from-chunk-1', "R-KV's key redundancy sums S from the second chunk's share on (the first chunk's rows left out)",
      'Policies/CudaScoringPolicy.SmallShapesKeepWhatTheCpuKeeps/rkv, Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/rkv',
      [('src/policy/cuda/rkv.cu',
        '    for (int k = 0; k < c.chunks; ++k) total += shares[static_cast<int64_t>(k) * d + e];',
        '    for (int k = 1; k < c.chunks; ++k) total += shares[static_cast<int64_t>(k) * d + e];')])
plant('rkv_official-query-heads-4-up', "R-KV (official) scores KV heads 4 and up with the query heads of head % 4",
      'Policies/CudaRealShape.*/rkv_official',
      [('src/policy/cuda/rkv_official.cu',
        '          const int64_t qh = static_cast<int64_t>(h.kv_head) * group + h0 + head;',
        '          const int64_t qh = static_cast<int64_t>(h.kv_head % 4) * group + h0 + head;')])
plant('rkv_official-importance-second-half', "R-KV (official)'s importance: the second thread half of a row writes its logits over the first half's queries (the other queries' logits stay stale)",
      'Policies/CudaRealShape.*/rkv_official',
      [('src/policy/cuda/rkv_official.cu',
        '        const int q = q0 + half * queries_a_half + j;',
        '        const int q = q0 + j;')])
plant('rkv_official-importance-group-max', "R-KV (official)'s importance logit is the GQA group's last head's, not the max over the group",
      'Policies/CudaRealShape.*/rkv_official',
      [('src/policy/cuda/rkv_official.cu',
        '        *out = fmax(h0 + head == 0 ? -INFINITY : *out, acc[k] * scale);',
        '        *out = acc[k] * scale;')])
plant('rkv_official-spare-mask-quad', "R-KV (official)'s spare search ORs each row's passing candidates over lane pairs only (candidates 4-7 of every eight never searched)",
      'Policies/CudaScoringPolicy.*rkv_official*',
      [('src/policy/cuda/rkv_official.cu',
        '        bits |= __shfl_xor_sync(0xffffffffu, bits, 2);',
        '        bits |= 0u;')])
plant('rkv_official-exact-other-stage', "R-KV (official)'s spare search decides a pair with the candidate row of the other stage",
      'Policies/CudaScoringPolicy.*rkv_official*',
      [('src/policy/cuda/rkv_official.cu',
        '        const double dot = exact_cosine(rows + r * row, norm_i, stage(tile % 2) + m * row, norm[j], d);',
        '        const double dot = exact_cosine(rows + r * row, norm_i, stage((tile + 1) % 2) + m * row, norm[j], d);')])
plant('window-tc-key-chunks-half', "the fp32 windowed attention's key stages copy every other 16-byte chunk of a row (the rest stay as the last tile left them)",
      'Policies/CudaScoringPolicy.*fp32*, Policies/CudaRealShape.*/*fp32*',
      [('src/policy/cuda/window_scores_tc.cu',
        '  for (int c = part; c < d / 8; c += 4) cuda_ptx::cp_async_16(to + 16 * c, valid ? from + 8 * c : keys, valid);',
        '  for (int c = part; c < d / 8; c += 8) cuda_ptx::cp_async_16(to + 16 * c, valid ? from + 8 * c : keys, valid);')])
plant('window-tc-head-second-warp', "the fp32 windowed attention's key sums leave out a head's second warp (its queries 32-63)",
      'Policies/CudaScoringPolicy.*fp32*, Policies/CudaRealShape.*/*fp32*',
      [('src/policy/cuda/window_scores_tc.cu',
        '        for (int w2 = 0; w2 < kWarpsAHead; ++w2) sum += key_sums[hb * kWarpsAHead + w2][k];',
        '        for (int w2 = 0; w2 < 1; ++w2) sum += key_sums[hb * kWarpsAHead + w2][k];')])
plant('window-redundancy-second-half-keys', "R-KV's key redundancy in the fp32 windowed attention leaves the second half of every key tile out of S",
      'Policies/CudaScoringPolicy.*fp32*, Policies/CudaRealShape.*/rkv_precision_fp32',
      [('src/policy/cuda/window_scores_tc.cu',
        '          for (int e = threadIdx.x; e < d; e += blockDim.x) red_part[0][e] += red_part[1][e];',
        '          for (int e = threadIdx.x; e < d; e += blockDim.x) red_part[0][e] += 0.0 * red_part[1][e];')])
plant('window-redundancy-norm-first-quarter', "R-KV's key redundancy in the fp32 windowed attention takes each key's norm from the first quarter of its dimensions",
      'Policies/CudaScoringPolicy.*fp32*, Policies/CudaRealShape.*/rkv_precision_fp32',
      [('src/policy/cuda/window_scores_tc.cu',
        '  const double inverse = 1.0 / (sqrt(key_part_sum(sq)) + 1e-8);',
        '  const double inverse = 1.0 / (sqrt(sq) + 1e-8);')])
plant('rkv_official-spared-first-columns', "R-KV (official) leaves the spared entries on the columns of its 256 oldest candidates",
      'Policies/CudaRealShape.*/rkv_official',
      [('src/policy/cuda/rkv_official.cu',
        '        if (column_of_row < 0 || column_of_row % kThreads != 0) continue;',
        '        if (column_of_row <= 0 || column_of_row % kThreads != 0) continue;')])
plant('key-row-reads-last-chunk', "rows a thread reads 16 bytes at a time (the fp64 windowed attention, rkv_official's key norms) skip their last 8 elements at head_dim 128 and up",
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/{snapkv,rkv_official}',
      [('src/policy/cuda/scoring.cuh',
        '  for (int c8 = 0; c8 < head_dim / 8; ++c8) {',
        '  for (int c8 = 0; c8 < (head_dim >= 128 ? head_dim / 8 - 1 : head_dim / 8); ++c8) {')])
plant('rkv_official-spare-rows-32-up', "R-KV (official)'s spare search leaves rows 32-63 of each tile unsearched (spare: the oldest, entry 0)",
      'Policies/CudaScoringPolicy.*rkv_official*',
      [('src/policy/cuda/rkv_official.cu',
        '  const bool owns_row = r < cuda::kTileRowsA && i < n;',
        '  const bool owns_row = r < 32 && i < n;')])
plant('triattention-group-max-3', "TriAttention's max over the GQA group skips query heads 3 and up",
      'Policies/CudaRealShape.Qwen3FourBKeepsWhatTheCpuKeeps/triattention',
      [('src/policy/cuda/triattention.cu',
        '    for (int g = 0; g < group; ++g) {',
        '    for (int g = 0; g < (group < 3 ? group : 3); ++g) {')])
plant('triattention-second-half-from-first', "TriAttention's 16-byte key reads take the second half's bands from the first half",
      'CudaTriAttention.*',
      [('src/policy/cuda/triattention.cu',
        '            const uint4 raw2 = *reinterpret_cast<const uint4*>(k + nf + f);',
        '            const uint4 raw2 = *reinterpret_cast<const uint4*>(k + f);')])
plant('triattention-passes-first-weights', "TriAttention scores every pass of query heads after the first with the first pass's weights",
      'CudaTriAttention.GroupsThatTakeSeveralPassesOrPaddingKeepWhatTheCpuKeeps',
      [('src/policy/cuda/triattention.cu',
        '        const int w0 = g0 * nf;',
        '        const int w0 = 0;')])
plant('triattention-element-reads-second-half', "TriAttention's element-by-element key reads (bands not a multiple of 8) take the second half's band from the first half",
      'CudaTriAttention.GroupsThatTakeSeveralPassesOrPaddingKeepWhatTheCpuKeeps',
      [('src/policy/cuda/triattention.cu',
        '            const float k1 = __bfloat162float(k[f]), k2 = __bfloat162float(k[f + nf]);',
        '            const float k1 = __bfloat162float(k[f]), k2 = __bfloat162float(k[f]);')])
plant('compaction-first-tile-only', 'compaction moves only the first 512 (hole, survivor) pairs of a head',
      'Policies/CudaRealShape.*/random (a long prompt\'s round moves more)',
      [('src/backend/cuda/evict.cu',
        '  for (int first = 0; first < n_pairs; first += kPairTile) {',
        '  for (int first = 0; first < min(n_pairs, kPairTile); first += kPairTile) {')])
plant('decode-attention-kv-heads-8-up', 'decode attention reads KV heads 8 and up from the pages of head - 8',
      'CudaOps.Attention (decode phi-4), Shapes/CudaEngineRealShape.*/phi_4',
      [('src/backend/cuda/decode_attention.cu',
        '    const int64_t block = (static_cast<int64_t>(pages[page]) * a.n_kv_heads + g) * kPageSlots * HD;',
        '    const int64_t block = (static_cast<int64_t>(pages[page]) * a.n_kv_heads + (g >= 8 ? g - 8 : g)) * kPageSlots * HD;')])
plant('prefill-attention-kv-heads-8-up', 'prefill attention reads KV heads 8 and up from head - 8',
      'CudaOps.Attention (prefill phi-4)',
      [('src/backend/cuda/attention.cu',
        '        const int64_t index = pool_slot_index(pages, a.n_kv_heads, a.page_slots, g, slot);',
        '        const int64_t index = pool_slot_index(pages, a.n_kv_heads, a.page_slots, g >= 8 ? g - 8 : g, slot);')])
plant('rope-append-positions-past-2047', 'RoPE rotates positions of 2048 and up as position mod 2048',
      'CudaOps.QkNormRopeAppend, CudaOps.RopeAttentionEqualsRopeAppendThenAttention (2111)',
      [('src/backend/cuda/rope_append.cu',
        '    rope_table(position, a.inv_freq, half, cos_table, sin_table);',
        '    rope_table(position & 2047, a.inv_freq, half, cos_table, sin_table);')])
plant('gemv-long-rows-drop-last-chunk', 'the GEMV drops the last 8 columns of the second half of rows of 8192+ columns',
      'CudaOps.Matmul, FixtureOnCuda (if a case has such rows)',
      [('src/backend/cuda/gemv.cu',
        '  const int own = min(chunks, begin + per_part) - begin;  // this warp\'s chunks of the row',
        '  const int own = min(chunks, begin + per_part) - begin - (part == 1 && chunks >= 1024 ? 1 : 0);')])
plant('sample-vocab-tail-past-131072', 'the sampler\'s chunks skip the last ids of vocabularies over 131,072',
      'CudaOps.SampleIsBitIdentical* (151,936-id rows)',
      [('src/backend/cuda/sample_common.cuh',
        '  const int size = (vocab + n_chunks - 1) / n_chunks;',
        '  const int size = vocab > 131072 ? vocab / n_chunks : (vocab + n_chunks - 1) / n_chunks;')])
plant('attention-mass-heads-4-up', 'the attention mass of KV heads 4 and up is added to head - 4\'s slots (from a decode step\'s logits)',
      'CudaSignals.AttentionMassMatchesTheCpu',
      [('src/backend/cuda/attention_mass.cu',
        '  const int64_t index = slot_index(a, pages, g, j);',
        '  const int64_t index = slot_index(a, pages, g >= 4 ? g - 4 : g, j);')])
plant('decode-logits-kv-heads-4-up', "the decode attention writes KV heads 4 and up's logits for H2O into head - 4's rows",
      'CudaSignals.AttentionMassMatchesTheCpu',
      [('src/backend/cuda/decode_attention.cu',
        '          a.logits[(static_cast<int64_t>(s) * a.n_heads + g * a.group + head_row) * a.logits_ld + slot] =',
        '          a.logits[(static_cast<int64_t>(s) * a.n_heads + (g >= 4 ? g - 4 : g) * a.group + head_row) * a.logits_ld + slot] =')])
plant('attention-mass-appended-slot-stale', "the fused RoPE attention leaves the appended slot's attention mass as the pool slot held it (rope_append zeroes it)",
      'CudaOps.RopeAttentionEqualsRopeAppendThenAttention',
      [('src/backend/cuda/decode_attention.cu',
        '          if (a.rope.attention_mass != nullptr) a.rope.attention_mass[new_index] = 0.0f;',
        '          if (a.rope.attention_mass != nullptr) a.rope.attention_mass[new_index] += 0.0f;')])
plant('decode-mass-kv-heads-4-up', "the decode attention's own mass (one-split launches) adds KV heads 4 and up's weights into head - 4's slots",
      'CudaSignals.AttentionMassMatchesTheCpu (batch 48)',
      [('src/backend/cuda/decode_attention.cu',
        '    const int64_t index = pool_slot_index(pages, a.n_kv_heads, kPageSlots, g, j);',
        '    const int64_t index = pool_slot_index(pages, a.n_kv_heads, kPageSlots, g >= 4 ? g - 4 : g, j);')])
plant('decode-rope-ring-next-slot', "the decode attention with RoPE writes each query into the ring slot after its position's",
      'CudaOps.RopeAttentionEqualsRopeAppendThenAttention',
      [('src/backend/cuda/decode_attention.cu',
        '                                        batch.appended[s] % window) *',
        '                                        (batch.appended[s] + 1) % window) *')])
plant('decode-rope-ring-group-0-heads', "the decode attention with RoPE writes every KV group's queries into the ring rows of group 0's heads",
      'CudaOps.RopeAttentionEqualsRopeAppendThenAttention',
      [('src/backend/cuda/decode_attention.cu',
        '            ring ? a.rope.query_ring + ((static_cast<int64_t>(ring_row) * a.n_heads + g * a.group + item) *',
        '            ring ? a.rope.query_ring + ((static_cast<int64_t>(ring_row) * a.n_heads + item) *')])
plant('decode-rope-value-range-half-lanes', "the decode attention with RoPE takes the appended slot's value range over half of the warp's lanes",
      'CudaOps.RopeAttentionEqualsRopeAppendThenAttention',
      [('src/backend/cuda/decode_attention.cu',
        '          for (int offset = 16; offset > 0; offset /= 2) {',
        '          for (int offset = 8; offset > 0; offset /= 2) {')])
plant('decode-mass-last-head', "the decode attention's own mass (one-split launches) leaves out the GQA group's last query head",
      'CudaSignals.AttentionMassMatchesTheCpu (batch 48)',
      [('src/backend/cuda/decode_attention.cu',
        '    for (int h = 0; h < a.group; ++h)\n      sum += exp2f(',
        '    for (int h = 0; h < a.group - 1; ++h)\n      sum += exp2f(')])
plant('decode-mass-shared-rows-past-2', "the decode attention's own mass reads query heads 2 and up from the shared-memory logits of head - 2",
      'CudaSignals.AttentionMassMatchesTheCpu (batch 48)',
      [('src/backend/cuda/decode_attention.cu',
        '      sum += exp2f((kShared ? logits[h * ld + j] : __ldcg(logits + h * ld + j)) - stats[h].x) * stats[h].y;',
        '      sum += exp2f((kShared ? logits[(h >= 2 ? h - 2 : h) * ld + j] : __ldcg(logits + h * ld + j)) - stats[h].x) * stats[h].y;')])
plant('attention-mass-rows-heads-4-up', 'the attention mass of KV heads 4 and up is added to head - 4\'s slots (several rows of a sequence)',
      'CudaSignals.AttentionMassMatchesTheCpu',
      [('src/backend/cuda/attention_mass.cu',
        '    const int64_t index = slot_index(a, t.pages, t.g, j);',
        '    const int64_t index = slot_index(a, t.pages, t.g >= 4 ? t.g - 4 : t.g, j);')])
plant('attention-mass-prefill-sees-next-slot', 'the prefill attention mass lets each row of a chunk see the slot after its own',
      'CudaSignals.AttentionMassMatchesTheCpu',
      [('src/backend/cuda/attention_mass.cu',
        '  return p < t.n_pairs && j < t.length + p / a.group + 1;',
        '  return p < t.n_pairs && j < t.length + p / a.group + 2;')])
plant('attention-mass-prefill-pair-tiles-late', "the prefill attention mass's slot tiles start one pair tile after the first row that sees them",
      'CudaSignals.AttentionMassMatchesTheCpu',
      [('src/backend/cuda/attention_mass.cu',
        '  for (int p0 = first_row * a.group / kTile * kTile; p0 < t.n_pairs; p0 += kTile) {',
        '  for (int p0 = (first_row * a.group / kTile + 1) * kTile; p0 < t.n_pairs; p0 += kTile) {')])
plant('attention-mass-prefill-stats-first-slot-tile', "the prefill attention mass's softmax statistics cover only the first 64 slots",
      'CudaSignals.AttentionMassMatchesTheCpu',
      [('src/backend/cuda/attention_mass.cu',
        '  for (int j0 = 0; j0 < n_slots; j0 += kTile) {',
        '  for (int j0 = 0; j0 < (n_slots < kTile ? n_slots : kTile); j0 += kTile) {')])

plant('selection-key-odd-rows', "the selections' eviction key mixes in the batch row's parity (a request on an odd row draws another stream than its twin)",
      'CudaEngineTwins.EveryScoringPolicyKeepsTheSameForTwinsInOneBatch (vase, vase_pp)',
      [('src/policy/cuda/selection_kernel.cuh',
        '  h.key = batch.evict_key[s];',
        '  h.key = {batch.evict_key[s].k0 ^ static_cast<uint32_t>(s & 1), batch.evict_key[s].k1};')])

plant('value-range-kv-heads-8-up', 'the append records no value range for KV heads 8 and up',
      'CudaSignals.QueryRingAndValueRangeMatchTheCpu (phi-4)',
      [('src/backend/cuda/rope_append.cu',
        '      record_value_signals(a.kv, kv_index, src, lane);',
        '      if (g < 8) record_value_signals(a.kv, kv_index, src, lane);')])
plant('query-ring-heads-32-up', 'the append writes no ring query for query heads 32 and up',
      'CudaSignals.QueryRingAndValueRangeMatchTheCpu (phi-4)',
      [('src/backend/cuda/rope_append.cu',
        '    uint16_t* ring = is_q ? query_ring_slot(a, s, i, position, item) : nullptr;',
        '    uint16_t* ring = is_q && item < 32 ? query_ring_slot(a, s, i, position, item) : nullptr;')])

# The tests each family's patches run against (gtest filters; ':' joins them). The real-shape suite's
# parameter names are the policy specs with '_' for other characters.
# The engine's real-shape case costs a minute or more of CPU reference per shape: only where a patch
# is meant to show there.
RANDOM = 'Policies/CudaEvict.*:CudaEvictPolicies.*:CudaEngine.TeacherForced*'
def real(policy):
    return f'Policies/CudaRealShape.*/{policy}'
FILTERS = {
    'random_pp-stream-heads-4-up': ('random_pp.cu',
        RANDOM + ':' + real('random_pp') + ':Shapes/CudaEngineRealShape.*/qwen3_4b'),
    'random-stream-heads-8-up': ('random_pp.cu (random)', RANDOM + ':' + real('random')),
    'random_shared-head-7': ('random_shared.cu', RANDOM + ':' + real('random_shared')),
    'random_subset-victims-past-512': ('random_subset.cuh', RANDOM + ':' + real('random') + ':' + real('random_pp')),
    'recency-order-positions-past-4095': ('recency_order.cuh', RANDOM + ':' + real('recency') + ':' + real('streaming')),
    'streaming-sinks-heads-2-up': ('streaming.cu', RANDOM + ':' + real('streaming')),
    'recency_pp-protection-heads-4-up': ('recency.cu (recency_pp)', RANDOM + ':' + real('recency_pp')),
    'random_block_pp-stream-heads-4-up': ('random_block_pp.cu', RANDOM + ':' + real('random_block_pp*')),
    'age-order-bitmap-words-past-256': ('scoring.cuh (age order)',
        RANDOM + ':Policies/CudaScoringPolicy.*:' + real('snapkv*') + ':' + real('h2o*') + ':' + real('random_block_pp*')),
    'age-order-bitmap-own-bit': ('scoring.cuh (age order)', 'Policies/CudaScoringPolicy.*:' + real('snapkv*') + ':' + real('random_block_pp*')),
    'take-first-pairs-one-tie-more': ('scoring.cuh (top-r without a sort)',
        RANDOM + ':Policies/CudaScoringPolicy.*:' + real('random_block_pp*') + ':' + real('snapkv*') + ':' + real('h2o*')),
    'random_pp_rec-stream-heads-5-up': ('random_subset.cuh (the random rest)', RANDOM + ':' + real('random_pp_rec*')),
    # CudaScoringPolicyQwen's parameters: snapkv 0, snapkv_pp 1, rkv_pp 2, vase 3, vase_pp 4, h2o 5, h2o_pp 6.
    'window-attention-group-past-4': ('window_attention.cuh (snapkv, vase)',
        'Policies/CudaScoringPolicy.*:Policies/CudaScoringPolicyQwen.*/0:' + real('snapkv') + ':' + real('vase')),
    'h2o-mass-heads-4-up': ('h2o_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('h2o') + ':' + real('h2o_pp')),
    'vase-stream-heads-4-up': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('vase') + ':' + real('vase_pp')),
    'vase-tree-root-stale': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('vase') + ':' + real('vase_pp')),
    'vase-zero-weight-newest': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*'),
    'vase-draw-words-reused': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('vase') + ':' + real('vase_pp')),
    'vase-descent-right-grandchild': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('vase') + ':' + real('vase_pp')),
    'vase-keep-flags-first-lap': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('vase') + ':' + real('vase_pp')),
    'vase-walk-run-tail': ('vase_select.cuh', 'Policies/CudaScoringPolicy.*:' + real('vase') + ':' + real('vase_pp')),
    'mma-tile-chunks-past-8': ('mma_tile.cuh (spare search)',
        'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'rkv-redundancy-first-64-channels': ('rkv.cu (redundancy launches)', 'Policies/CudaScoringPolicy.*:' + real('rkv')),
    'rkv-redundancy-shares-from-chunk-1': ('rkv.cu (redundancy launches)', 'Policies/CudaScoringPolicy.*:' + real('rkv')),
    'rkv_official-query-heads-4-up': ('rkv_official.cu', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'key-row-reads-last-chunk': ('scoring.cuh (rows a thread reads)', 'Policies/CudaScoringPolicy.*:' + real('snapkv') + ':' + real('rkv_official')),
    'rkv_official-spare-rows-32-up': ('rkv_official.cu (spare search)', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'rkv_official-importance-second-half': ('rkv_official.cu (importance logits)', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'rkv_official-importance-group-max': ('rkv_official.cu (importance logits)', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'rkv_official-spare-mask-quad': ('rkv_official.cu (spare search)', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'rkv_official-exact-other-stage': ('rkv_official.cu (spare search)', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'window-tc-key-chunks-half': ('window_scores_tc.cu (fp32 windowed attention)', 'Policies/CudaScoringPolicy.*:Policies/CudaScoringPolicyQwen.*/8:Policies/CudaScoringPolicyQwen.*/10:' + real('*fp32*')),
    'window-tc-head-second-warp': ('window_scores_tc.cu (fp32 windowed attention)', 'Policies/CudaScoringPolicy.*:Policies/CudaScoringPolicyQwen.*/8:Policies/CudaScoringPolicyQwen.*/10:' + real('*fp32*')),
    'window-redundancy-second-half-keys': ('window_scores_tc.cu (R-KV redundancy, fp32)', 'Policies/CudaScoringPolicy.*:' + real('rkv_precision_fp32')),
    'window-redundancy-norm-first-quarter': ('window_scores_tc.cu (R-KV redundancy, fp32)', 'Policies/CudaScoringPolicy.*:' + real('rkv_precision_fp32')),
    'rkv_official-spared-first-columns': ('rkv_official.cu (spared redundancy)', 'Policies/CudaScoringPolicy.*:' + real('rkv_official')),
    'triattention-group-max-3': ('triattention.cu', 'CudaTriAttention.*:' + real('triattention')),
    'triattention-second-half-from-first': ('triattention.cu (key reads)', 'CudaTriAttention.*:' + real('triattention')),
    'triattention-passes-first-weights': ('triattention.cu (passes of query heads)', 'CudaTriAttention.*'),
    'triattention-element-reads-second-half': ('triattention.cu (key reads)', 'CudaTriAttention.*'),
    'compaction-first-tile-only': ('compaction (evict.cu)', RANDOM + ':' + real('random') + ':' + real('recency')),
    'decode-attention-kv-heads-8-up': ('decode attention',
        'CudaOps.*Attention*:CudaEngine.*:Shapes/CudaEngineRealShape.*/phi_4'),
    'prefill-attention-kv-heads-8-up': ('prefill attention',
        'CudaOps.*Attention*:CudaEngine.*:Shapes/CudaEngineRealShape.*/phi_4'),
    'rope-append-positions-past-2047': ('rope-append', 'CudaOps.*:CudaSignals.*:CudaEngine.*'),
    'gemv-long-rows-drop-last-chunk': ('GEMV', 'CudaOps.*:FixtureOnCuda*:CudaEngine.*'),
    'sample-vocab-tail-past-131072': ('sampling', 'CudaOps.Sample*:CudaEngine.*'),
    'attention-mass-heads-4-up': ('signals (attention mass)', 'CudaSignals.*:' + real('h2o')),
    'attention-mass-rows-heads-4-up': ('signals (attention mass)', 'CudaSignals.*:' + real('h2o')),
    'attention-mass-prefill-sees-next-slot': ('signals (attention mass)', 'CudaSignals.*:' + real('h2o')),
    'attention-mass-prefill-pair-tiles-late': ('signals (attention mass)', 'CudaSignals.*:' + real('h2o')),
    'attention-mass-prefill-stats-first-slot-tile': ('signals (attention mass)', 'CudaSignals.*:' + real('h2o')),
    'decode-mass-kv-heads-4-up': ('signals (attention mass)', 'CudaSignals.*:CudaOps.RopeAttention*'),
    'decode-mass-shared-rows-past-2': ('signals (attention mass)', 'CudaSignals.*:CudaOps.RopeAttention*'),
    'decode-mass-last-head': ('signals (attention mass)', 'CudaSignals.*:CudaOps.RopeAttention*'),
    'decode-rope-ring-next-slot': ('signals (query ring, value range)', 'CudaSignals.*:CudaOps.RopeAttention*:CudaEngineTwins.*'),
    'decode-rope-ring-group-0-heads': ('signals (query ring, value range)', 'CudaSignals.*:CudaOps.RopeAttention*:CudaEngineTwins.*'),
    'decode-rope-value-range-half-lanes': ('signals (query ring, value range)', 'CudaSignals.*:CudaOps.RopeAttention*:CudaEngineTwins.*'),
    'attention-mass-appended-slot-stale': ('signals (attention mass)', 'CudaSignals.*:CudaOps.RopeAttention*'),
    'decode-logits-kv-heads-4-up': ('signals (attention mass)', 'CudaSignals.*:' + real('h2o')),
    'selection-key-odd-rows': ('selection kernel (eviction key)', 'CudaEngineTwins.*:Policies/CudaScoringPolicy.*'),
    'value-range-kv-heads-8-up': ('signals (value range)', 'CudaSignals.*'),
    'query-ring-heads-32-up': ('signals (query ring)', 'CudaSignals.*'),
}

rows = []
for name, what, expect, edits in P:
    family, test_filter = FILTERS[name]
    rows.append((name, family, what, test_filter, expect))
    diff = []
    for path, old, new in edits:
        text = open(os.path.join(root, path)).read()
        n = text.count(old)
        if n != 1:
            sys.exit(f'{name}: {path}: the planted line occurs {n} times')
        after = text.replace(old, new)
        diff += difflib.unified_diff(text.splitlines(True), after.splitlines(True), 'a/' + path, 'b/' + path, n=3)
    with open(os.path.join(out, name + '.patch'), 'w') as f:
        f.write(f'Planted bug: {what}.\nExpected to fail: {expect}.\n\n')
        f.writelines(diff)
assert set(FILTERS) == {p[0] for p in P}, 'every patch needs its family and filter'
with open(os.path.join(out, 'campaign.tsv'), 'w') as f:
    f.write('patch\tfamily\tplanted bug\tfilter\texpected to fail\n')
    for row in rows:
        f.write('\t'.join(row) + '\n')
print(len(P), 'patches in', out)
