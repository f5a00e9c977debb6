/* HAL call latency: uprobes on entry store the arguments by tid, uretprobes compute the latency in the kernel
 * and emit one struct hal_call_event (or, with -DAGGREGATE, count it in a log2 histogram per (device, op)).
 *
 * Specialisation (-D from npu_trace.bpf.config.BpfConfig):
 *   FILTER_PIDS, FILTER_COMMS, FILTER_DEVS: only these processes, task names, devices (scope.h)
 *   THRESHOLD_NS=<ns>   emit only calls at least this slow (aggregate mode: the histogram counts all)
 *   AGGREGATE           histograms in `hist`; events only above THRESHOLD_NS
 *   MAX_PENDING=<n>     calls in flight (all threads)   RINGBUF_PAGES / USE_PERF_BUFFER: see output.h
 */
#include <uapi/linux/ptrace.h>
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

#ifndef MAX_PENDING
#define MAX_PENDING 10240
#endif
#ifndef THRESHOLD_NS
#define THRESHOLD_NS 0
#endif

BPF_HASH(pending, u32, struct hal_entry, MAX_PENDING);
#ifdef AGGREGATE
BPF_HASH(hist, struct hist_key, u64, 4096);
#endif

static __always_inline int stash(u16 op, u32 dev, u64 a0, u64 a1, u64 a2)
{
    if (!npu_task_wanted() || !npu_dev_wanted(dev))
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct hal_entry ent = {};
    ent.ts_ns = bpf_ktime_get_ns();
    ent.args[0] = a0;
    ent.args[1] = a1;
    ent.args[2] = a2;
    ent.dev = dev;
    ent.op = op;
    if (pending.update(&tid, &ent) != 0)
        npu_count_lost(NPU_LOST_PENDING);
    return 0;
}

int hal_mem_alloc_entry(struct pt_regs *ctx)
{
    return stash(NPU_OP_MEM_ALLOC, (u32)PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), 0);
}

int hal_mem_free_entry(struct pt_regs *ctx)
{
    return stash(NPU_OP_MEM_FREE, (u32)PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0, 0);
}

int hal_sq_task_send_entry(struct pt_regs *ctx)
{
    return stash(NPU_OP_SQ_TASK_SEND, (u32)PT_REGS_PARM1(ctx), (u32)PT_REGS_PARM2(ctx), (u32)PT_REGS_PARM3(ctx),
                 (u32)PT_REGS_PARM4(ctx));
}

int hal_cq_report_recv_entry(struct pt_regs *ctx)
{
    /* timeout_ms is an int: sign-extended into the u64 slot, read back as s32 */
    return stash(NPU_OP_CQ_REPORT_RECV, (u32)PT_REGS_PARM1(ctx), (u32)PT_REGS_PARM2(ctx), (u32)PT_REGS_PARM3(ctx),
                 (u64)(s64)(s32)PT_REGS_PARM4(ctx));
}

static __always_inline u16 log2_slot(u64 v)
{
    u16 slot = 0;
#pragma unroll
    for (int shift = 32; shift > 0; shift >>= 1) {
        if (v >> shift) {
            v >>= shift;
            slot += shift;
        }
    }
    return slot;
}

#ifdef AGGREGATE
static __always_inline void count_hist(const struct hal_entry *ent, u64 latency)
{
    struct hist_key key = {};
    key.dev = ent->dev;
    key.op = ent->op;
    key.slot = log2_slot(latency);
    u64 zero = 0;
    u64 *n = hist.lookup_or_try_init(&key, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
}
#endif

static __always_inline int emit(struct pt_regs *ctx, const struct hal_entry *ent, u64 now)
{
    struct hal_call_event *e = npu_reserve(sizeof(*e));
    if (!e)
        return 0;
    npu_fill_header(&e->hdr, now, NPU_EV_HAL_CALL);
    e->entry_ts_ns = ent->ts_ns;
    e->latency_ns = now - ent->ts_ns;
    e->args[0] = ent->args[0];
    e->args[1] = ent->args[1];
    e->args[2] = ent->args[2];
    e->dev = ent->dev;
    e->ret = (s32)PT_REGS_RC(ctx);
    e->op = ent->op;
    e->pad0 = 0;
    e->pad1 = 0;
    npu_submit(ctx, e, sizeof(*e));
    return 0;
}

int hal_return(struct pt_regs *ctx)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct hal_entry *found = pending.lookup(&tid);
    if (!found)
        return 0;
    struct hal_entry ent = *found;
    pending.delete(&tid);
    u64 now = bpf_ktime_get_ns();
    u64 latency = now - ent.ts_ns;
#ifdef AGGREGATE
    count_hist(&ent, latency);
#endif
#ifdef AGGREGATE
    if (THRESHOLD_NS == 0 || latency < THRESHOLD_NS) /* aggregate: only the slow calls leave as events */
        return 0;
#else
    if (latency < THRESHOLD_NS)
        return 0;
#endif
    return emit(ctx, &ent, now);
}
