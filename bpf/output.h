/* The output side shared by every npu-trace program (map-free parts; see OUTPUT BLOCK below).
 *
 * Ring buffer (default, kernels >= 5.8): records are reserved in place and submitted with BPF_RB_NO_WAKEUP,
 * the reader polls on an interval (no wake-up per event) and reads the records in place from its own mapping
 * of the ring buffer (npu_trace/bpf/ringbuf.py); a failed reserve is counted in the per-CPU array
 * lost[NPU_LOST_RESERVE].
 * Perf buffer (-DUSE_PERF_BUFFER, older kernels): records are built in a per-CPU scratch slot and copied;
 * the reader's lost callback counts what the kernel dropped.
 *
 * OUTPUT BLOCK: bcc rewrites map calls (`events.ringbuf_reserve(...)`) only in the main file, never in an
 * included header or a macro, so every program carries the same block between the markers
 * "---- output block" and "---- end of output block" (tests/test_bpf_layout.py keeps the copies identical).
 * A program then writes:
 *     struct x_event *e = npu_reserve(sizeof(*e));  if (!e) return 0;  ...fill every field...;
 *     npu_submit(ctx, e, sizeof(*e));
 */
#ifndef NPU_OUTPUT_H
#define NPU_OUTPUT_H

#ifndef RINGBUF_PAGES
#define RINGBUF_PAGES 256 /* 1 MiB with 4 KiB pages; a power of two */
#endif

struct npu_scratch {
    u64 words[16]; /* 128 bytes: at least the largest event struct (perf buffer path) */
};

static __always_inline void npu_fill_header(struct npu_event_header *h, u64 ts, u16 type)
{
    u64 id = bpf_get_current_pid_tgid();
    h->ts_ns = ts;
    h->pid = id >> 32;
    h->tid = (u32)id;
    h->type = type;
    h->cpu = bpf_get_smp_processor_id();
    h->flags = 0;
}

#endif /* NPU_OUTPUT_H */
