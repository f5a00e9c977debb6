/* Event structs shared by every npu-trace BPF program and its Python mirror (npu_trace/bpf/layout.py).
 *
 * Every record starts with struct npu_event_header; `type` says which payload follows. All padding is
 * explicit (no implicit holes), fields are naturally aligned, little-endian. tests/test_bpf_layout.py parses
 * this file and checks names, sizes and offsets against the mirror: change both together.
 *
 * Clock: ts_ns is bpf_ktime_get_ns() = CLOCK_MONOTONIC, the tracefs `mono` clock.
 */
#ifndef NPU_TRACE_H
#define NPU_TRACE_H

#define NPU_EV_HAL_CALL 1
#define NPU_EV_IRQ 2
#define NPU_EV_BENCH 3
#define NPU_EV_TRACEPOINT 4

/* HAL operations (the op field of hal_call_event and hist_key) */
#define NPU_OP_MEM_ALLOC 0
#define NPU_OP_MEM_FREE 1
#define NPU_OP_SQ_TASK_SEND 2
#define NPU_OP_CQ_REPORT_RECV 3
#define NPU_OP_SQ_MEM_GET 4        /* the real HAL's halSqMemGet: a slot of the SQ to write commands into */
#define NPU_OP_SQ_MSG_SEND 5       /* the real HAL's halSqMsgSend: the commands written there, sent (910, 310P) */
#define NPU_OP_COUNT 6
#define NPU_HAL_ARGS 6            /* values of a HAL call after its device (hal_call_event.args) */
#define NPU_DEV_UNKNOWN 4294967295 /* a call whose device the API does not carry (real halMemFree of an unseen va) */
/* bits of hal_call_event.hdr.flags */
#define NPU_HAL_NO_TASK_IDS 1      /* the chip's task layout is unknown: the call's stream and task were not read */

#define NPU_IRQ_NAME_LEN 32
#define NPU_HIST_SLOTS 64

/* Tracepoints read by field offsets (trs_tracepoints.bpf.c, npu_trace/bpf/tracepoints.py) */
#define NPU_TP_SLOTS 5     /* programs on_tp_0 .. on_tp_4: tracepoints attached at once */
#define NPU_TP_VALUES 8    /* values of a tp_event, indexed by NPU_TPV_* */
#define NPU_TP_TEXT_LEN 24 /* the record's string, NUL included ("Logic Cq Recv NoMatch" is 21) */
#define NPU_TPV_DEV 0      /* device id (trs: inst.devid) */
#define NPU_TPV_TS 1       /* TS id (inst.tsid) */
#define NPU_TPV_STREAM 2
#define NPU_TPV_TASK 3
#define NPU_TPV_SQ 4       /* SQ id */
#define NPU_TPV_CQ 5       /* CQ id (trs_core: the logic CQ id) */
#define NPU_TPV_ERR 6      /* error code (trs_core:logic_cqe) */
#define NPU_TPV_AUX 7      /* one more value, named by the tracepoint's spec (errtype, sqe_type, cqe counts) */
/* which tracepoint fired (tp_event.tp): the Ascend driver's five; other ids are free for other specs */
#define NPU_TP_TRS_CHAN_SQE 1
#define NPU_TP_TRS_CHAN_CQE 2
#define NPU_TP_TRS_CHAN_RECV 3
#define NPU_TP_TRS_CORE_LOGIC_CQE 4
#define NPU_TP_TRS_CORE_LOGIC_CQ_RECV 5

/* indexes of the per-CPU `lost` array */
#define NPU_LOST_RESERVE 0 /* bpf_ringbuf_reserve failed: the ring buffer was full */
#define NPU_LOST_PENDING 1 /* an entry could not be stored (pending hash full): its return is not measured */
#define NPU_LOST_SLOTS 2

struct npu_event_header {
    __u64 ts_ns; /* when the event completed (return / handler exit) */
    __u32 pid;   /* tgid */
    __u32 tid;
    __u16 type;  /* NPU_EV_* */
    __u16 cpu;
    __u32 flags; /* hal_call_event: NPU_HAL_* bits; the other events: 0 */
};

/* A HAL call, entry and return paired in the kernel (uprobe + uretprobe, keyed by tid). */
struct hal_call_event {
    struct npu_event_header hdr;
    __u64 entry_ts_ns;
    __u64 latency_ns; /* hdr.ts_ns - entry_ts_ns */
    __u64 args[NPU_HAL_ARGS]; /* the values after the device, in the order of npu_trace.bpf.formats.HAL_FIELDS
                                 (unused ones 0); docs/architecture.md "HAL ABIs" says what each ABI fills */
    __u32 dev;
    __s32 ret;
    __u16 op;         /* NPU_OP_* */
    __u16 pad0;
    __u32 pad1;
};

/* One hard-IRQ handler run (irq:irq_handler_entry -> irq:irq_handler_exit on the same CPU). */
struct irq_event {
    struct npu_event_header hdr;
    __u64 entry_ts_ns;
    __u64 duration_ns;
    __s32 irq;
    __s32 ret; /* IRQ_NONE 0 / IRQ_HANDLED 1 / IRQ_WAKE_THREAD 2 */
    char name[NPU_IRQ_NAME_LEN];
};

/* The benchmark's event (tracepoint syscalls:sys_enter_getpid). */
struct bench_event {
    struct npu_event_header hdr;
    __u64 seq;
};

/* One hit of a tracepoint read by field offsets (trs_tracepoints.bpf.c): the values its spec names. */
struct tp_event {
    struct npu_event_header hdr;
    __u64 values[NPU_TP_VALUES]; /* NPU_TPV_* order; 0 where the tracepoint has no such value */
    __u16 tp;                    /* NPU_TP_*: which tracepoint fired */
    __u16 slot;                  /* the program that read it (on_tp_<slot>) */
    __u8 present;                /* bit NPU_TPV_*: the tracepoint has this value */
    __u8 is_signed;              /* bit NPU_TPV_*: a signed field, sign-extended to 64 bits */
    __u16 pad0;
    char text[NPU_TP_TEXT_LEN];  /* the record's __data_loc string, NUL-terminated ("Task Send"); "" if none */
};

/* Pending HAL call entry, keyed by tid. */
struct hal_entry {
    __u64 ts_ns;
    __u64 args[NPU_HAL_ARGS];
    __u64 out_ptr; /* real ABI: the user address of the call's output, read at return when it succeeded */
    __u32 dev;
    __u16 op;
    __u16 flags;   /* NPU_HAL_* bits, copied into the event's hdr.flags */
};

/* Aggregate mode: log2 latency histogram slot per (device, op). */
struct hist_key {
    __u32 dev;
    __u16 op;
    __u16 slot; /* floor(log2(latency_ns)), 0 for latency 0 */
};

#endif /* NPU_TRACE_H */
