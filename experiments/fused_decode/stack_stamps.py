#!/usr/bin/env python3
"""A timing-only copy of experiments/fused_decode/decode_stack.cu: %globaltimer stamps of layer 10.

    python3 experiments/fused_decode/stack_stamps.py experiments/fused_decode/decode_stack.cu /tmp/stamped.cu

Build the copy in place of the kernel (never commit it), then run the driver on the GPU machine, e.g.
`build-cuda/experiments/fused_decode/kvdice_fused_decode --config configs/shapes/qwen3-4b.json
--contexts 128 --steps 100`: at context 200 thread 0 of CTAs 0,
64 and 131 print two lines each (printf from the kernel):
  STK: the launch's time, the producer's "empty" and the consumers' "full" waits (all layers, layer 10), then
       layer 10's points in us from its start: norm wait over, norm built, QKV done, QKV counter seen
       (attention CTAs), attention done, attention counter seen, O done, O counter seen, gate/up done,
       gate/up counter seen, down done;
  STX: the attention item's phases (entry, queries roped, chunks done, merged), O after its vector, and
       the wait-over / dot-done times of the first slots of O and QKV.
README.md in this folder ("Where a layer's time goes") reads these. The edits are textual: when the kernel changes
shape, an assertion names the line this script no longer finds.
"""
import sys

src, out = sys.argv[1], sys.argv[2]
s = open(src).read()


def rep(old, new, count=1):
    global s
    n = s.count(old)
    assert n == count, (old[:70], n)
    s = s.replace(old, new)


rep("namespace kvdice::fused_decode {\n\nusing namespace backend::cuda;  // the library's device helpers (bf16_dot, rope, silu)\n\nnamespace {\n", """namespace kvdice::fused_decode {

using namespace backend::cuda;  // the library's device helpers (bf16_dot, rope, silu)

namespace {
__device__ inline unsigned long long now_ns() { unsigned long long t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }
__shared__ unsigned long long st_full, st_empty, st_full_all, st_empty_all;
__shared__ unsigned long long st_x[32];
""")
# Waits: the consumers' on "full", the producer's on "empty".
rep("""    barrier_wait(&ring.full[g % kRing], (g / kRing) & 1);  // slot g has landed""", """    { unsigned long long t0 = threadIdx.x == 0 ? now_ns() : 0;
    barrier_wait(&ring.full[g % kRing], (g / kRing) & 1);  // slot g has landed
    if (threadIdx.x == 0) { unsigned long long d = now_ns() - t0; st_full_all += d; if (layer == 10) st_full += d; } }""")
rep("""        if (g >= kRing) barrier_wait(&ring.empty[g % kRing], (g / kRing - 1) & 1);""", """        unsigned long long t0 = now_ns();
        if (g >= kRing) barrier_wait(&ring.empty[g % kRing], (g / kRing - 1) & 1);
        unsigned long long d = now_ns() - t0; st_empty_all += d; if (g / ring.per_layer == 10) st_empty += d;""")
# Per-slot stamps of O and QKV, per-phase ones of the attention item.
rep("""    dot_slot(w, x,""", """    if (layer == 10 && threadIdx.x == 0 && s < 6 && (stage == kO || stage == kQkv)) st_x[(stage == kO ? 4 : 18) + 2 * s] = now_ns();
    dot_slot(w, x,""")
rep("""    if (threadIdx.x % 32 == 0) barrier_arrive(&ring.empty[g % kRing]);""", """    if (layer == 10 && threadIdx.x == 0 && s < 6 && (stage == kO || stage == kQkv)) st_x[(stage == kO ? 5 : 19) + 2 * s] = now_ns();
    if (threadIdx.x % 32 == 0) barrier_arrive(&ring.empty[g % kRing]);""")
rep("""  const int items = s.n_kv_heads * splits;
""", """  const int items = s.n_kv_heads * splits;
  if (layer == 10 && threadIdx.x == 0) st_x[0] = now_ns();
""")
rep("""    consumer_sync();  // queries in shared memory; the new key and value visible to the CTA
""", """    consumer_sync();  // queries in shared memory; the new key and value visible to the CTA
    if (layer == 10 && threadIdx.x == 0) st_x[1] = now_ns();
""")
rep("""    consumer_sync();
    for (int idx = threadIdx.x; idx < group * HD; idx += kConsumerThreads) {""", """    if (layer == 10 && threadIdx.x == 0) st_x[2] = now_ns();
    consumer_sync();
    if (layer == 10 && threadIdx.x == 0) st_x[3] = now_ns();
    for (int idx = threadIdx.x; idx < group * HD; idx += kConsumerThreads) {""")
# Layer 10's points.
rep("""  __syncthreads();  // the last barrier of all kThreads threads""", """  if (threadIdx.x == 0) { st_full = st_empty = st_full_all = st_empty_all = 0; for (int i = 0; i < 32; ++i) st_x[i] = 0; }
  __syncthreads();  // the last barrier of all kThreads threads
  const unsigned long long t_start = now_ns();
  unsigned long long ts[12] = {};
#define STAMP(i) if (layer == 10 && threadIdx.x == 0) ts[i] = now_ns();""")
rep("""    load_norm_weight(l.attn_norm, a.shape.hidden, w_s);
    if (layer > 0)""", """    STAMP(0)
    load_norm_weight(l.attn_norm, a.shape.hidden, w_s);
    if (layer > 0)""")
rep("""    else consumer_sync();
    load_normed(a, w_s, x_s, act, scratch);""", """    else consumer_sync();
    STAMP(1)
    load_normed(a, w_s, x_s, act, scratch);
    STAMP(2)""")
rep("""    signal(point(layer, kQkvDone));
""", """    STAMP(3)
    signal(point(layer, kQkvDone));
""")
rep("""      wait_for(point(layer, kQkvDone), grid);
""", """      wait_for(point(layer, kQkvDone), grid);
      STAMP(4)
""")
rep("""    signal(point(layer, kAttentionDone));
""", """    STAMP(5)
    signal(point(layer, kAttentionDone));
""")
rep("""    load_vector(a.attn, q_dim, act);""", """    STAMP(6)
    load_vector(a.attn, q_dim, act);
    if (layer == 10 && threadIdx.x == 0) st_x[16] = now_ns();""")
rep("""    signal(point(layer, kODone));""", """    STAMP(7)
    signal(point(layer, kODone));""")
rep("""    load_normed(a, w_s, x_s, act, scratch);
    g = gemv_stage(a, ring, layer, kGateUp""", """    STAMP(8)
    load_normed(a, w_s, x_s, act, scratch);
    g = gemv_stage(a, ring, layer, kGateUp""")
rep("""    signal(point(layer, kGateUpDone));
    wait_for(point(layer, kGateUpDone), grid);""", """    STAMP(9)
    signal(point(layer, kGateUpDone));
    wait_for(point(layer, kGateUpDone), grid);
    STAMP(10)""")
rep("""    signal(point(layer, kDownDone));
  }""", """    STAMP(11)
    signal(point(layer, kDownDone));
  }
  if (threadIdx.x == 0 && a.batch.length[0] == 200 && (blockIdx.x == 0 || blockIdx.x == 64 || blockIdx.x == 131)) {
    const unsigned long long b = ts[0];
    const auto us = [&](unsigned long long t) { return t ? (t - b) / 1e3 : 0.0; };
    printf("STK cta %d kernel %.2f us; waits: full %.2f empty %.2f (all layers); layer10: full %.2f empty %.2f | %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f\\n",
      blockIdx.x, (now_ns() - t_start) / 1e3, st_full_all / 1e3, st_empty_all / 1e3, st_full / 1e3, st_empty / 1e3,
      us(ts[1]), us(ts[2]), us(ts[3]), us(ts[4]), us(ts[5]), us(ts[6]), us(ts[7]), us(ts[8]), us(ts[9]), us(ts[10]), us(ts[11]));
    printf("STX cta %d att %.2f %.2f %.2f %.2f | O after vector %.2f | O slots %.2f %.2f %.2f %.2f %.2f %.2f | QKV slots %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.2f\\n",
      blockIdx.x, us(st_x[0]), us(st_x[1]), us(st_x[2]), us(st_x[3]), us(st_x[16]), us(st_x[4]), us(st_x[5]), us(st_x[6]),
      us(st_x[7]), us(st_x[8]), us(st_x[9]), us(st_x[18]), us(st_x[19]), us(st_x[20]), us(st_x[21]), us(st_x[22]),
      us(st_x[23]), us(st_x[24]), us(st_x[25]));
  }""")
open(out, "w").write(s)
