/* Hard-IRQ handler durations: irq:irq_handler_entry stores (ts, irq, name) per CPU (hard IRQ handlers do not
 * nest on one CPU), irq:irq_handler_exit emits one struct irq_event, only for the IRQs the profile names.
 *
 * Specialisation (-D from npu_trace.bpf.config.BpfConfig):
 *   IRQ_PREFIX_0 .. IRQ_PREFIX_3   string literals: an IRQ whose name starts with one of them is traced
 *                                  (none given: every IRQ); IRQ_PREFIX_<i>_LEN is its length
 *   IRQ_NUM_0 .. IRQ_NUM_3         IRQ numbers traced in addition to the names
 *   THRESHOLD_NS, RINGBUF_PAGES, USE_PERF_BUFFER: see hal_uprobes.bpf.c / output.h
 */
#include "npu_trace.h"
#include "output.h"

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

#ifndef THRESHOLD_NS
#define THRESHOLD_NS 0
#endif

struct irq_start {
    u64 ts_ns;
    s32 irq;
    u32 traced;
    char name[NPU_IRQ_NAME_LEN];
};

BPF_PERCPU_ARRAY(irq_start_at, struct irq_start, 1);

static __always_inline int has_prefix(const char *name, const char *prefix, int len)
{
#pragma unroll
    for (int i = 0; i < NPU_IRQ_NAME_LEN; i++) {
        if (i >= len)
            return 1;
        if (name[i] != prefix[i])
            return 0;
    }
    return 1;
}

#define MATCH_PREFIX(i)                                                         \
    if (has_prefix(name, IRQ_PREFIX_##i, sizeof(IRQ_PREFIX_##i) - 1))           \
        return 1;

static __always_inline int wanted(s32 irq, const char *name)
{
#if !defined(IRQ_PREFIX_0) && !defined(IRQ_NUM_0)
    return 1;
#else
#ifdef IRQ_NUM_0
    if (irq == IRQ_NUM_0)
        return 1;
#endif
#ifdef IRQ_NUM_1
    if (irq == IRQ_NUM_1)
        return 1;
#endif
#ifdef IRQ_NUM_2
    if (irq == IRQ_NUM_2)
        return 1;
#endif
#ifdef IRQ_NUM_3
    if (irq == IRQ_NUM_3)
        return 1;
#endif
#ifdef IRQ_PREFIX_0
    MATCH_PREFIX(0)
#endif
#ifdef IRQ_PREFIX_1
    MATCH_PREFIX(1)
#endif
#ifdef IRQ_PREFIX_2
    MATCH_PREFIX(2)
#endif
#ifdef IRQ_PREFIX_3
    MATCH_PREFIX(3)
#endif
    return 0;
#endif
}

TRACEPOINT_PROBE(irq, irq_handler_entry)
{
    u32 zero = 0;
    struct irq_start *st = irq_start_at.lookup(&zero);
    if (!st)
        return 0;
    st->traced = 0;
    TP_DATA_LOC_READ_STR(st->name, name, NPU_IRQ_NAME_LEN);
    if (!wanted(args->irq, st->name))
        return 0;
    st->irq = args->irq;
    st->ts_ns = bpf_ktime_get_ns();
    st->traced = 1;
    return 0;
}

TRACEPOINT_PROBE(irq, irq_handler_exit)
{
    u32 zero = 0;
    struct irq_start *st = irq_start_at.lookup(&zero);
    if (!st || !st->traced || st->irq != args->irq)
        return 0;
    st->traced = 0;
    u64 now = bpf_ktime_get_ns();
    if (now - st->ts_ns < THRESHOLD_NS)
        return 0;
    struct irq_event *e = npu_reserve(sizeof(*e));
    if (!e)
        return 0;
    npu_fill_header(&e->hdr, now, NPU_EV_IRQ);
    e->entry_ts_ns = st->ts_ns;
    e->duration_ns = now - st->ts_ns;
    e->irq = args->irq;
    e->ret = args->ret;
    __builtin_memcpy(e->name, st->name, NPU_IRQ_NAME_LEN);
    npu_submit(args, e, sizeof(*e));
    return 0;
}
