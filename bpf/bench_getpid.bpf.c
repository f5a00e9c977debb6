/* Benchmark source: one small struct bench_event per getpid() syscall (the cheapest tracepoint to drive).
 * FILTER_PIDS=<tgid> restricts it to the generator (scope.h); RINGBUF_PAGES / USE_PERF_BUFFER: see output.h. */
#include "npu_trace.h"
#include "output.h"
#include "scope.h"

/* ---- output block (identical in every program, see output.h) ---- */
BPF_PERCPU_ARRAY(lost, u64, NPU_LOST_SLOTS);

static __always_inline void npu_count_lost(u32 slot)
{
    u64 *n = lost.lookup(&slot);
    if (n)
        *n += 1;
}

#ifdef USE_PERF_BUFFER
BPF_PERF_OUTPUT(events);
BPF_PERCPU_ARRAY(npu_scratch_buf, struct npu_scratch, 1);

static __always_inline void *npu_reserve(u32 size)
{
    u32 zero = 0;
    return npu_scratch_buf.lookup(&zero);
}

static __always_inline void npu_submit(void *ctx, void *e, u32 size)
{
    events.perf_submit(ctx, e, size);
}
#else
BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);

static __always_inline void *npu_reserve(u32 size)
{
    void *e = events.ringbuf_reserve(size);
    if (!e)
        npu_count_lost(NPU_LOST_RESERVE);
    return e;
}

static __always_inline void npu_submit(void *ctx, void *e, u32 size)
{
    events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}
#endif
/* ---- end of output block ---- */

BPF_PERCPU_ARRAY(seq, u64, 1);

TRACEPOINT_PROBE(syscalls, sys_enter_getpid)
{
    if (!npu_task_wanted())
        return 0;
    u32 zero = 0;
    u64 *n = seq.lookup(&zero);
    if (!n)
        return 0;
    *n += 1;
    struct bench_event *e = npu_reserve(sizeof(*e));
    if (!e)
        return 0;
    npu_fill_header(&e->hdr, bpf_ktime_get_ns(), NPU_EV_BENCH);
    e->seq = *n;
    npu_submit(args, e, sizeof(*e));
    return 0;
}
