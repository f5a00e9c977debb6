/* The simulator's libascend_hal.so: the HAL functions npu-trace probes, with the real driver's prototypes
 * (docs/hal-abi.md), so the real-ABI BPF programs run against it. Loaded by the
 * executor (npu-sim -H LIB); each call returns what the executor set with npu_sim_hal_next() just before it,
 * after the injected latency, and writes its output only when it succeeds, as the driver does. It exports no
 * npu_sim_hal_abi marker: npu_trace.bpf.abi gives it the real ABI. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "hal_real.h"

#define EXPORT __attribute__((noinline, used, visibility("default")))
#define BARRIER() asm volatile("" ::: "memory")
#define DRV_ERROR_INVALID_VALUE 1

static __thread int32_t t_ret;
static __thread uint64_t t_delay_ns;
static __thread uint64_t t_out;

EXPORT void npu_sim_hal_next(int32_t ret, uint64_t delay_ns, uint64_t out) {
    t_ret = ret;
    t_delay_ns = delay_ns;
    t_out = out;
}

static __attribute__((noinline)) int32_t finish(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t end = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec + t_delay_ns;
    struct timespec until = {(time_t)(end / 1000000000ULL), (long)(end % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0) {
    }
    BARRIER();
    return t_ret;
}

EXPORT int halMemAlloc(void **pp, unsigned long long size, unsigned long long flag) {
    (void)size;
    (void)flag;
    if (pp == NULL)
        return DRV_ERROR_INVALID_VALUE;
    int32_t ret = finish();
    if (ret == 0)
        *pp = (void *)(uintptr_t)t_out;
    return ret;
}

EXPORT int halMemFree(void *pp) {
    BARRIER();
    return pp == NULL ? DRV_ERROR_INVALID_VALUE : finish();
}

EXPORT int halSqTaskSend(uint32_t devId, struct sim_task_send_info *info) {
    (void)devId;
    if (info == NULL || info->sqe_addr == NULL)
        return DRV_ERROR_INVALID_VALUE;
    int32_t ret = finish();
    if (ret == 0)
        info->pos = (uint32_t)t_out;
    return ret;
}

EXPORT int halCqReportRecv(uint32_t devId, struct sim_report_recv_info *info) {
    (void)devId;
    if (info == NULL)
        return DRV_ERROR_INVALID_VALUE;
    int32_t ret = finish();
    if (ret == 0)
        info->report_cqe_num = (uint32_t)t_out;
    return ret;
}

#define SIM_SQ_SLOTS 4

/* the slot halSqMemGet hands out: the calling thread's own (the driver has one per SQ, which the runtime fills
 * and sends under the stream's lock; the executor holds one lock around the pair) */
static __thread uint8_t t_slot[SIM_SQ_SLOTS * SIM_SQE_SIZE];

EXPORT int halSqMemGet(uint32_t devId, struct sim_sq_mem_get_input *in, struct sim_sq_mem_get_output *out) {
    (void)devId;
    if (in == NULL || out == NULL)
        return DRV_ERROR_INVALID_VALUE;
    int32_t ret = finish();
    if (ret == 0) {
        out->cmd_count = in->cmd_count < SIM_SQ_SLOTS ? in->cmd_count : SIM_SQ_SLOTS;
        out->cmd_ptr = t_slot;
        out->pos = (uint32_t)t_out;
    }
    return ret;
}

EXPORT int halSqMsgSend(uint32_t devId, struct sim_sq_msg_info *info) {
    (void)devId;
    if (info == NULL || info->cmd_count == 0)
        return DRV_ERROR_INVALID_VALUE;
    return finish();
}
