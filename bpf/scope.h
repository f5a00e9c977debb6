/* Scope filters, specialised by -D lists (npu_trace.bpf.config.BpfConfig):
 *   FILTER_PIDS=<tgid>,...        only these processes (the thread-group id: every thread of each)
 *   FILTER_COMMS="<name>",...     only tasks of these names (bpf_get_current_comm: the thread's own name)
 *   FILTER_DEVS=<dev>,...         only these devices
 * At most NPU_SCOPE_MAX values each. NPU_ANY(CMP, v, list...) is CMP(v, a) || CMP(v, b) ..., unrolled by the
 * preprocessor: no loop and no array for the verifier.
 */
#ifndef NPU_SCOPE_H
#define NPU_SCOPE_H

#define NPU_SCOPE_MAX 8
#define NPU_COMM_LEN 16

#define NPU_ANY1(C, v, a) C(v, a)
#define NPU_ANY2(C, v, a, ...) (C(v, a) || NPU_ANY1(C, v, __VA_ARGS__))
#define NPU_ANY3(C, v, a, ...) (C(v, a) || NPU_ANY2(C, v, __VA_ARGS__))
#define NPU_ANY4(C, v, a, ...) (C(v, a) || NPU_ANY3(C, v, __VA_ARGS__))
#define NPU_ANY5(C, v, a, ...) (C(v, a) || NPU_ANY4(C, v, __VA_ARGS__))
#define NPU_ANY6(C, v, a, ...) (C(v, a) || NPU_ANY5(C, v, __VA_ARGS__))
#define NPU_ANY7(C, v, a, ...) (C(v, a) || NPU_ANY6(C, v, __VA_ARGS__))
#define NPU_ANY8(C, v, a, ...) (C(v, a) || NPU_ANY7(C, v, __VA_ARGS__))
#define NPU_ANY_PICK(_1, _2, _3, _4, _5, _6, _7, _8, N, ...) N
#define NPU_ANY(C, v, ...)                                                                                     \
    NPU_ANY_PICK(__VA_ARGS__, NPU_ANY8, NPU_ANY7, NPU_ANY6, NPU_ANY5, NPU_ANY4, NPU_ANY3, NPU_ANY2, NPU_ANY1,   \
                 _)(C, v, __VA_ARGS__)

#define NPU_EQ(v, a) ((u64)(v) == (u64)(a))
#define NPU_COMM_IS(comm, name) npu_comm_is(comm, name, sizeof(name))

/* comm equals name (`size` counts its NUL: "py" does not match "python") */
static __always_inline int npu_comm_is(const char *comm, const char *name, int size)
{
#pragma unroll
    for (int i = 0; i < NPU_COMM_LEN; i++) {
        if (i >= size)
            return 1;
        if (comm[i] != name[i])
            return 0;
    }
    return 1;
}

/* 1 when the current task is in the scope's processes and task names (no such filter: always) */
static __always_inline int npu_task_wanted(void)
{
#ifdef FILTER_PIDS
    if (!NPU_ANY(NPU_EQ, bpf_get_current_pid_tgid() >> 32, FILTER_PIDS))
        return 0;
#endif
#ifdef FILTER_COMMS
    char comm[NPU_COMM_LEN] = {};
    bpf_get_current_comm(comm, sizeof(comm));
    if (!NPU_ANY(NPU_COMM_IS, comm, FILTER_COMMS))
        return 0;
#endif
    return 1;
}

/* 1 when dev is one of the scope's devices (no such filter: always) */
static __always_inline int npu_dev_wanted(u64 dev)
{
#ifdef FILTER_DEVS
    return NPU_ANY(NPU_EQ, dev, FILTER_DEVS);
#else
    return 1;
#endif
}

#endif
