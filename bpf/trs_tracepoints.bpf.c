/* Tracepoints read by field offsets: the Ascend driver's trs_chan:* and trs_core:* (or any tracepoint whose
 * integer fields a spec names). Their records are made of struct-typed fields (`struct trs_id_inst inst`)
 * that TRACEPOINT_PROBE's generated `args` struct cannot describe, so each slot's program reads the raw record
 * at offsets npu_trace/bpf/tracepoints.py computed from the tracepoint's tracefs format file at run time (and
 * the profile's struct layouts), handed over as -D constants.
 *
 * One generic program per slot, `on_tp_<n>` (n < NPU_TP_SLOTS), attached to one tracepoint; ctx is the raw
 * record (common_type at offset 0, as in the format file). Each hit emits one struct tp_event (npu_trace.h):
 * the values NPU_TPV_* the slot reads (0 and their `present` bit clear for the ones the tracepoint lacks),
 * the record's __data_loc string (trs: "Task Send", "Logic Cq Enque", ...) and which tracepoint fired.
 *
 * Specialisation (-D, from npu_trace.bpf.tracepoints.TpPlan.cflags; a slot without TP<n>_ID has no program):
 *   TP<n>_ID=<NPU_TP_*>          which tracepoint slot n reads (tp_event.tp)
 *   TP<n>_TEXT_OFF=<off>         offset of its `__data_loc char[]` field, -1: none
 *   TP<n>_<V>_OFF, TP<n>_<V>_SIZE, TP<n>_<V>_SIGNED   for V in DEV TS STREAM TASK SQ CQ ERR AUX: offset of
 *                                value V in the record (-1: the tracepoint has none), its size (1, 2, 4 or 8
 *                                bytes, little-endian) and 1 when it is signed (sign-extended to 64 bits)
 *   FILTER_DEVS=<dev>,...        only records whose DEV value is one of these (records without one pass;
 *                                scope.h)
 *   RINGBUF_PAGES, USE_PERF_BUFFER: see output.h; NPU_LEGACY_READ: see compat.h
 * No pid filter: the driver dispatches completions in IRQ context, whatever process the CPU was running.
 */
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

#if NPU_TP_SLOTS != 5
#error "one on_tp_<n> program per slot below: NPU_TP_SLOTS changed"
#endif
_Static_assert(sizeof(struct tp_event) <= sizeof(struct npu_scratch), "tp_event outgrew the perf scratch slot");

struct tp_values {
    u64 v[NPU_TP_VALUES];
    u8 present;
    u8 is_signed;
};

/* Value `i` from `size` bytes at ctx + off (off < 0: the tracepoint has none). Every argument but ctx is a
 * compile-time constant: the branches fold away and the read has a constant size. */
static __always_inline void tp_read(void *ctx, struct tp_values *out, int i, int off, int size, int is_signed)
{
    u64 v = 0;
    if (off < 0 || size <= 0 || size > 8)
        return;
    npu_read_kernel(&v, size, (char *)ctx + off); /* little-endian: the low bytes of v */
    if (is_signed && size < 8)
        v = (u64)(((s64)(v << (64 - 8 * size))) >> (64 - 8 * size));
    out->v[i] = v;
    out->present |= 1 << i;
    if (is_signed)
        out->is_signed |= 1 << i;
}

#define TP_READ(n, V) tp_read(ctx, &vals, NPU_TPV_##V, TP##n##_##V##_OFF, TP##n##_##V##_SIZE, TP##n##_##V##_SIGNED)
#define TP_READ_ALL(n)                                                                                         \
    TP_READ(n, DEV);                                                                                           \
    TP_READ(n, TS);                                                                                            \
    TP_READ(n, STREAM);                                                                                        \
    TP_READ(n, TASK);                                                                                          \
    TP_READ(n, SQ);                                                                                            \
    TP_READ(n, CQ);                                                                                            \
    TP_READ(n, ERR);                                                                                           \
    TP_READ(n, AUX);

static __always_inline int tp_emit(void *ctx, u16 slot, u16 tp, int text_off, const struct tp_values *vals)
{
    if ((vals->present & (1 << NPU_TPV_DEV)) && !npu_dev_wanted(vals->v[NPU_TPV_DEV]))
        return 0;
    struct tp_event *e = npu_reserve(sizeof(*e));
    if (!e)
        return 0;
    npu_fill_header(&e->hdr, bpf_ktime_get_ns(), NPU_EV_TRACEPOINT);
#pragma unroll
    for (int i = 0; i < NPU_TP_VALUES; i++)
        e->values[i] = vals->v[i];
    e->tp = tp;
    e->slot = slot;
    e->present = vals->present;
    e->is_signed = vals->is_signed;
    e->pad0 = 0;
    __builtin_memset(e->text, 0, NPU_TP_TEXT_LEN);
    if (text_off >= 0) {
        u32 loc = 0; /* __data_loc: length << 16 | offset of the string from the start of the record */
        npu_read_kernel(&loc, sizeof(loc), (char *)ctx + text_off);
        npu_read_kernel_str(e->text, NPU_TP_TEXT_LEN, (char *)ctx + (loc & 0xFFFF));
    }
    npu_submit(ctx, e, sizeof(*e));
    return 0;
}

#ifdef TP0_ID
int on_tp_0(void *ctx)
{
    struct tp_values vals = {};
    TP_READ_ALL(0)
    return tp_emit(ctx, 0, TP0_ID, TP0_TEXT_OFF, &vals);
}
#endif

#ifdef TP1_ID
int on_tp_1(void *ctx)
{
    struct tp_values vals = {};
    TP_READ_ALL(1)
    return tp_emit(ctx, 1, TP1_ID, TP1_TEXT_OFF, &vals);
}
#endif

#ifdef TP2_ID
int on_tp_2(void *ctx)
{
    struct tp_values vals = {};
    TP_READ_ALL(2)
    return tp_emit(ctx, 2, TP2_ID, TP2_TEXT_OFF, &vals);
}
#endif

#ifdef TP3_ID
int on_tp_3(void *ctx)
{
    struct tp_values vals = {};
    TP_READ_ALL(3)
    return tp_emit(ctx, 3, TP3_ID, TP3_TEXT_OFF, &vals);
}
#endif

#ifdef TP4_ID
int on_tp_4(void *ctx)
{
    struct tp_values vals = {};
    TP_READ_ALL(4)
    return tp_emit(ctx, 4, TP4_ID, TP4_TEXT_OFF, &vals);
}
#endif
