/* HAL call latency: uprobes on entry store the arguments by tid, uretprobes compute the latency in the kernel
 * and emit one struct hal_call_event (or, with -DAGGREGATE, count it in a log2 histogram per (device, op)).
 * Two sets of entry programs, one per ABI (npu_trace.bpf.abi chooses, from the library's symbols): hal_* for the
 * simulator's own (arguments in registers), real_* for libascend_hal.so's (a device in the flag bits, structs
 * read from user memory, outputs read at return); both emit the same records, hal_return ends both.
 *
 * Specialisation (-D from npu_trace.bpf.config.BpfConfig):
 *   FILTER_PIDS, FILTER_COMMS, FILTER_DEVS: only these processes, task names, devices (scope.h)
 *   THRESHOLD_NS=<ns>   emit only calls at least this slow (aggregate mode: the histogram counts all)
 *   AGGREGATE           histograms in `hist`; events only above THRESHOLD_NS
 *   MAX_PENDING=<n>     calls in flight (all threads)   MAX_LIVE_ALLOCS=<n>: addresses remembered for halMemFree
 *   TASK_STREAM_OFF=<off>, TASK_TASK_OFF=<off>   the chip's task layout (npu_trace.device.chips): where the stream
 *                       and task ids (u16 each) sit in a task descriptor (halSqTaskSend's SQEs, the commands
 *                       halSqMsgSend sends); absent: an unknown chip, the calls are timed and their stream and
 *                       task left empty (hdr.flags NPU_HAL_NO_TASK_IDS), never read at a guessed offset
 *   RINGBUF_PAGES / USE_PERF_BUFFER: see output.h;  NPU_LEGACY_READ: see compat.h
 */
#include <uapi/linux/ptrace.h>
#include "npu_trace.h"
#include "compat.h"
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
#ifndef MAX_LIVE_ALLOCS
#define MAX_LIVE_ALLOCS 65536
#endif

BPF_HASH(pending, u32, struct hal_entry, MAX_PENDING);
/* real ABI: device of each address a traced halMemAlloc handed out, for the halMemFree that names only the
 * address (least recently used entries give way: such a free reports NPU_DEV_UNKNOWN) */
BPF_TABLE("lru_hash", u64, u32, alloc_dev, MAX_LIVE_ALLOCS);
#ifdef AGGREGATE
BPF_HASH(hist, struct hist_key, u64, 4096);
#endif

static __always_inline int store(struct hal_entry *ent)
{
    if (!npu_task_wanted() || !npu_dev_wanted(ent->dev))
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    ent->ts_ns = bpf_ktime_get_ns();
    if (pending.update(&tid, ent) != 0)
        npu_count_lost(NPU_LOST_PENDING);
    return 0;
}

/* ---- the simulator's own ABI (npu_trace/sim/npu_sim.c, marked by the symbol npu_sim_hal_abi) ---- */
int hal_mem_alloc_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    ent.op = NPU_OP_MEM_ALLOC;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = PT_REGS_PARM2(ctx); /* size */
    ent.args[1] = PT_REGS_PARM3(ctx); /* flag */
    return store(&ent);
}

int hal_mem_free_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    ent.op = NPU_OP_MEM_FREE;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = PT_REGS_PARM2(ctx); /* va */
    return store(&ent);
}

int hal_sq_task_send_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    ent.op = NPU_OP_SQ_TASK_SEND;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = (u32)PT_REGS_PARM2(ctx); /* ts */
    ent.args[1] = (u32)PT_REGS_PARM3(ctx); /* stream */
    ent.args[2] = (u32)PT_REGS_PARM4(ctx); /* task */
    return store(&ent);
}

int hal_cq_report_recv_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    ent.op = NPU_OP_CQ_REPORT_RECV;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = (u32)PT_REGS_PARM2(ctx);              /* ts */
    ent.args[1] = (u32)PT_REGS_PARM3(ctx);              /* stream */
    ent.args[2] = (u64)(s64)(s32)PT_REGS_PARM4(ctx);    /* timeout_ms: an int, sign-extended, read back as s32 */
    return store(&ent);
}

/* ---- the real HAL's ABI (libascend_hal.so; prototypes and layouts in docs/hal-abi.md) ----
 * drvError_t halMemAlloc(void **pp, unsigned long long size, unsigned long long flag)   flag bits 0-9: devid
 * drvError_t halMemFree(void *pp)
 * drvError_t halSqTaskSend(uint32_t devId, struct halTaskSendInfo *info)
 * drvError_t halCqReportRecv(uint32_t devId, struct halReportRecvInfo *info)
 * drvError_t halSqMemGet(uint32_t devId, struct halSqMemGetInput *in, struct halSqMemGetOutput *out)
 * drvError_t halSqMsgSend(uint32_t devId, struct halSqMsgInfo *info)
 * Offsets for LP64 (x86-64 and aarch64 alike: 4-byte int and enum, 8-byte pointers, natural alignment). */
#define HAL_FLAG_DEVID_MASK 0x3FFULL /* MEM_DEVID_WIDTH 10 */
#define TSI_TS_ID 4                  /* struct halTaskSendInfo: type 0, tsId 4, sqId 8, timeout 12, sqe_addr 16, */
#define TSI_SQ_ID 8                  /*   sqe_num 24, pos 28 (output: the first SQE's position), res[8] 32 */
#define TSI_SQE_ADDR 16
#define TSI_SQE_NUM 24
#define TSI_POS 28
#define RRI_TS_ID 4                  /* struct halReportRecvInfo: type 0, tsId 4, cqId 8, timeout 12, cqe_addr 16, */
#define RRI_CQ_ID 8                  /*   cqe_num 24, report_cqe_num 28 (output), stream_id 32, task_id 36, res[8] 40 */
#define RRI_TIMEOUT 12
#define RRI_REPORT_CQE_NUM 28
#define RRI_STREAM_ID 32
#define RRI_TASK_ID 36
#define SMI_TS_ID 4                  /* struct halSqMemGetInput: type 0, tsId 4, sqId 8, cmdCount 12, res[8] 16 */
#define SMI_SQ_ID 8
#define SMI_CMD_COUNT 12
#define SMO_CMD_COUNT 0              /* struct halSqMemGetOutput (all output): cmdCount 0, cmdPtr 8, pos 16, res[7] 20 */
#define SMO_CMD_PTR 8
#define SMO_POS 16
#define SQM_TS_ID 4                  /* struct halSqMsgInfo: type 0, tsId 4, sqId 8, cmdCount 12, reportCount 16, */
#define SQM_SQ_ID 8                  /*   res[8] 20 */
#define SQM_CMD_COUNT 12
#define SQM_REPORT_COUNT 16

/* real ABI: the command slot halSqMemGet last handed out per (device, TS, SQ): the driver's one buffer of that SQ
 * (sq_info->buf), which the caller fills and halSqMsgSend then sends */
struct sq_key {
    u32 dev;
    u32 ts;
    u32 sq;
    u32 pad;
};
BPF_HASH(sq_slot, struct sq_key, u64, 1024);

static __always_inline u64 user_u64(u64 addr)
{
    u64 v = 0;
    npu_read_user(&v, sizeof(v), (const void *)addr);
    return v;
}

static __always_inline u64 user_u32(u64 addr)
{
    u32 v = 0;
    npu_read_user(&v, sizeof(v), (const void *)addr);
    return v;
}

static __always_inline u64 user_u16(u64 addr)
{
    u16 v = 0;
    npu_read_user(&v, sizeof(v), (const void *)addr);
    return v;
}

/* the stream and task ids of the task descriptor at `desc` (an SQE, a TS command) into args[i], args[i + 1], by
 * the chip's layout; an unknown layout, or no descriptor, reads nothing and marks the call */
static __always_inline void task_ids(struct hal_entry *ent, u64 desc, int i)
{
#if defined(TASK_STREAM_OFF) && defined(TASK_TASK_OFF)
    if (desc) {
        ent->args[i] = user_u16(desc + TASK_STREAM_OFF);
        ent->args[i + 1] = user_u16(desc + TASK_TASK_OFF);
        return;
    }
#endif
    ent->flags |= NPU_HAL_NO_TASK_IDS; /* an unknown layout, or no descriptor to read */
}

int real_mem_alloc_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    u64 flag = PT_REGS_PARM3(ctx);
    ent.op = NPU_OP_MEM_ALLOC;
    ent.dev = (u32)(flag & HAL_FLAG_DEVID_MASK);
    ent.args[0] = PT_REGS_PARM2(ctx); /* size */
    ent.args[1] = flag;
    ent.out_ptr = PT_REGS_PARM1(ctx); /* pp: *pp is the address, known at return */
    return store(&ent);
}

int real_mem_free_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    u64 va = PT_REGS_PARM1(ctx);
    u32 *dev = alloc_dev.lookup(&va);
    ent.op = NPU_OP_MEM_FREE;
    ent.dev = dev ? *dev : NPU_DEV_UNKNOWN;
    ent.args[0] = va;
    return store(&ent);
}

int real_sq_task_send_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    u64 info = PT_REGS_PARM2(ctx);
    ent.op = NPU_OP_SQ_TASK_SEND;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = user_u32(info + TSI_TS_ID);
    task_ids(&ent, user_u64(info + TSI_SQE_ADDR), 1);
    ent.args[3] = user_u32(info + TSI_SQ_ID);
    ent.args[4] = user_u32(info + TSI_SQE_NUM);
    ent.out_ptr = info + TSI_POS;
    return store(&ent);
}

int real_cq_report_recv_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    u64 info = PT_REGS_PARM2(ctx);
    ent.op = NPU_OP_CQ_REPORT_RECV;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = user_u32(info + RRI_TS_ID);
    ent.args[1] = user_u32(info + RRI_STREAM_ID);
    ent.args[2] = (u64)(s64)(s32)user_u32(info + RRI_TIMEOUT);
    ent.args[3] = user_u32(info + RRI_TASK_ID);
    ent.args[4] = user_u32(info + RRI_CQ_ID);
    ent.out_ptr = info + RRI_REPORT_CQE_NUM;
    return store(&ent);
}

int real_sq_mem_get_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    u64 in = PT_REGS_PARM2(ctx);
    ent.op = NPU_OP_SQ_MEM_GET;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = user_u32(in + SMI_TS_ID);
    ent.args[1] = user_u32(in + SMI_SQ_ID);
    ent.args[2] = user_u32(in + SMI_CMD_COUNT);
    ent.out_ptr = PT_REGS_PARM3(ctx); /* out: the slot, read at return */
    return store(&ent);
}

int real_sq_msg_send_entry(struct pt_regs *ctx)
{
    struct hal_entry ent = {};
    u64 info = PT_REGS_PARM2(ctx);
    struct sq_key key = {};
    ent.op = NPU_OP_SQ_MSG_SEND;
    ent.dev = (u32)PT_REGS_PARM1(ctx);
    ent.args[0] = user_u32(info + SQM_TS_ID);
    ent.args[3] = user_u32(info + SQM_SQ_ID);
    ent.args[4] = user_u32(info + SQM_CMD_COUNT);
    ent.args[5] = user_u32(info + SQM_REPORT_COUNT);
    key.dev = ent.dev;
    key.ts = (u32)ent.args[0];
    key.sq = (u32)ent.args[3];
    u64 *slot = sq_slot.lookup(&key);
    task_ids(&ent, slot ? *slot : 0, 1); /* the first command the caller wrote into the slot */
    return store(&ent);
}

/* halSqMemGet returned: its outputs (slots granted, the slot's address, its position), the slot kept for the
 * halSqMsgSend that sends what the caller writes into it */
static __always_inline void mem_get_outputs(struct hal_entry *ent)
{
    struct sq_key key = {};
    u64 slot = user_u64(ent->out_ptr + SMO_CMD_PTR);
    ent->args[3] = user_u32(ent->out_ptr + SMO_CMD_COUNT);
    ent->args[4] = slot;
    ent->args[5] = user_u32(ent->out_ptr + SMO_POS);
    key.dev = ent->dev;
    key.ts = (u32)ent->args[0];
    key.sq = (u32)ent->args[1];
    sq_slot.update(&key, &slot);
}

/* the real ABI's outputs, written by the call: read once it returned DRV_ERROR_NONE (0) */
static __always_inline void read_outputs(struct hal_entry *ent, s32 ret)
{
    if (ent->op == NPU_OP_MEM_FREE) {
        if (ret == 0)
            alloc_dev.delete(&ent->args[0]);
        return;
    }
    if (!ent->out_ptr || ret != 0)
        return;
    if (ent->op == NPU_OP_MEM_ALLOC) {
        u64 va = user_u64(ent->out_ptr);
        ent->args[2] = va;
        if (va)
            alloc_dev.update(&va, &ent->dev);
    } else if (ent->op == NPU_OP_SQ_MEM_GET) {
        mem_get_outputs(ent);
    } else {
        ent->args[5] = user_u32(ent->out_ptr); /* halSqTaskSend: pos; halCqReportRecv: report_cqe_num */
    }
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
#pragma unroll
    for (int i = 0; i < NPU_HAL_ARGS; i++)
        e->args[i] = ent->args[i];
    e->hdr.flags = ent->flags;
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
    read_outputs(&ent, (s32)PT_REGS_RC(ctx));
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
