/* npu-sim: the simulated NPU executor (see npu_trace/sim/__init__.py for the ABI).
 *
 * usage: npu-sim [-m MIGRATE_US] [-H LIB [-T stars|ts]] PLAN OUT
 * PLAN: one action per line:  t_ns thread after flags func ret delay_ns a0 a1 a2 a3 a4 a5 str
 *   t_ns      earliest start, as an offset from the executor's own start (CLOCK_MONOTONIC)
 *   thread    the executor thread that runs it (0..63; 0 is the main thread). Each thread runs its own actions
 *             in plan order; the plan's threads are 0..(highest thread named)
 *   after     index (0-based, among the plan's actions) of an EARLIER action that must have returned before this
 *             one starts, whatever its planned time says; -1: none
 *   flags     bit 1 AWAY: run on a CPU other than the one `after` returned on (an interrupt completing a task
 *             submitted on another CPU); bit 2 HOP: move to another CPU inside the call, during its injected
 *             latency, so its entry and return probes fire on different CPUs (HAL calls only)
 *   func      one of the exported function names below
 *   ret       return value a HAL call must return (ignored for void functions)
 *   delay_ns  latency injected inside a HAL call
 *   a0..a5    numeric arguments in C order, strings left out (decimal, may be negative)
 *   str       the string argument (rest of the line), "-" when the function has none
 * -m MIGRATE_US: every MIGRATE_US microseconds the executor moves each thread but thread 0 to another CPU, as a
 *   loaded scheduler does; a thread follows at its next safe point (before an action, and inside a call's
 *   injected latency). 0 (the default): no periodic moves.
 * -H LIB: the four HAL actions call the real-ABI functions of the shared library LIB (the simulator's
 *   libascend_hal.so, hal_real.c) instead of this program's own, with the same plan line:
 *     halMemAlloc     a0 dev, a1 size, a2 flag (dev goes into its bits 0-9), a3 the address *pp receives
 *     halMemFree      a0 dev (not passed: the real call has none), a1 va
 *     halSqTaskSend   a0 dev, a1 ts, a2 stream, a3 task (in the STARS SQE header), a4 sq, a5 the pos it reports
 *     halCqReportRecv a0 dev, a1 ts, a2 stream, a3 timeout, a4 task, a5 cq; ret >= 0: the call returns 0 with
 *                     report_cqe_num = ret, ret < 0: it returns ret
 *   The driver-side functions stay this program's own.
 * -T LAYOUT (with -H): how a task is sent, as the chip's runtime does (npu_trace.device.chips): `stars` (the
 *   default; 910B, 910_93) one STARS SQE through halSqTaskSend; `ts` (910, 310P) a TS command (stream id at 0,
 *   task id at 2) written into the slot halSqMemGet hands out (its pos a5), then halSqMsgSend with the action's
 *   ret and latency; one lock around the pair, as the runtime's stream lock.
 * CPUs: with two or more CPUs in the process's affinity mask and a plan of several threads (or -m, or a flag),
 *   every thread is pinned to one CPU at a time (thread i starts on the (i mod n)-th allowed CPU) and only moves
 *   itself (AWAY, HOP, -m): the CPU it reads with sched_getcpu() is the CPU its probes fire on. Otherwise
 *   (one CPU, or the single-thread plan of old) nothing is pinned and nothing moves.
 * OUT: a first line "cpus N c0 .. cN-1 pinned P" (the CPUs the executor may use; P 1 when it pins), then one
 *   line per action in plan order: start_ns end_ns ret tid cpu_in cpu_out (CLOCK_MONOTONIC just before / after
 *   the call, what it returned, the thread id that ran it, sched_getcpu() just before / after the call).
 * Deadlock-free: an action only waits for an earlier action, and each thread runs its actions in plan order, so
 * the earliest action not yet run can always run.
 * All scenario logic lives in Python: this program only waits, calls and timestamps.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hal_real.h"

#define EXPORT __attribute__((noinline, used, visibility("default")))
#define BARRIER() asm volatile("" ::: "memory")
#define SPIN_LIMIT_NS 2000000ULL     /* one unpinned thread: spin the last 2 ms before a deadline */
#define PINNED_SPIN_NS 100000ULL     /* pinned threads share CPUs: spin less, sleep more */
#define MAX_THREADS 64
#define F_AWAY 1u
#define F_HOP 2u

static __thread volatile int32_t t_ret;
static __thread volatile uint64_t t_delay_ns;
static __thread volatile unsigned t_flags;
static __thread volatile uint64_t t_sink;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- threads and CPUs ---- */
struct worker {
    int index;
    pthread_t handle;
    size_t *items, count; /* its actions (plan indices), in plan order */
    int cpu;              /* the CPU it is pinned to, -1 when not pinned */
    atomic_int want;      /* the CPU the migrator asks for, -1: none */
};

static struct worker g_workers[MAX_THREADS];
static int g_nthreads = 1;
static int g_cpus[CPU_SETSIZE];
static int g_ncpus;
static int g_pinned;
static uint64_t g_spin_ns = SPIN_LIMIT_NS;
static uint64_t g_migrate_ns;
static __thread struct worker *t_self;

static void die(const char *what, int cpu) {
    fprintf(stderr, "npu-sim: %s %d: %s\n", what, cpu, strerror(errno));
    exit(1);
}

static void pin(struct worker *w, int cpu) {
    if (!g_pinned || w->cpu == cpu)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        die("cannot pin a thread to cpu", cpu);
    while (sched_getcpu() != cpu) /* the kernel moves the caller before returning; make sure of it */
        sched_yield();
    w->cpu = cpu;
}

static int next_cpu(int cpu) {
    for (int i = 0; i < g_ncpus; i++)
        if (g_cpus[i] == cpu)
            return g_cpus[(i + 1) % g_ncpus];
    return g_cpus[0];
}

static void follow_migrator(void) {
    struct worker *w = t_self;
    if (w == NULL || atomic_load_explicit(&w->want, memory_order_relaxed) < 0)
        return;
    int want = atomic_exchange(&w->want, -1);
    if (want >= 0)
        pin(w, want);
}

static void hop(void) {
    if (t_self != NULL && g_pinned)
        pin(t_self, next_cpu(t_self->cpu));
}

static void sleep_until(uint64_t deadline) {
    for (;;) {
        follow_migrator();
        uint64_t now = now_ns();
        if (now >= deadline)
            return;
        uint64_t left = deadline - now;
        if (left <= g_spin_ns) {
            BARRIER();
            continue;
        }
        uint64_t nap = left - g_spin_ns / 2;
        if (g_migrate_ns && nap > g_migrate_ns)
            nap = g_migrate_ns; /* wake up to follow the migrator */
        uint64_t wake = now + nap;
        struct timespec ts = {(time_t)(wake / 1000000000ULL), (long)(wake % 1000000000ULL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
    }
}

static __attribute__((noinline)) int32_t hal_work(void) {
    uint64_t deadline = now_ns() + t_delay_ns;
    int entry_cpu = (t_flags & F_HOP) && g_pinned ? t_self->cpu : -1; /* where the entry probe fired */
    if (entry_cpu >= 0)
        hop();
    sleep_until(deadline);
    if (entry_cpu >= 0 && t_self->cpu == entry_cpu)
        hop(); /* the migrator moved it back meanwhile: the return still fires on another CPU */
    BARRIER();
    return t_ret;
}

/* ---- user-space HAL (libascend_hal.so names, this program's own ABI) ---- */
/* The marker of this ABI (npu_trace.bpf.abi): a file exporting it gets the simulator's argument layout. */
EXPORT int npu_sim_hal_abi(void) {
    return 1;
}

EXPORT int halMemAlloc(uint32_t dev, uint64_t size, uint64_t flag) {
    BARRIER();
    t_sink = dev + size + flag;
    return hal_work();
}

EXPORT int halMemFree(uint32_t dev, uint64_t va) {
    BARRIER();
    t_sink = dev + va;
    return hal_work();
}

EXPORT int halSqTaskSend(uint32_t dev, uint32_t ts, uint32_t stream, uint32_t task) {
    BARRIER();
    t_sink = dev + ts + stream + task;
    return hal_work();
}

EXPORT int halCqReportRecv(uint32_t dev, uint32_t ts, uint32_t stream, int32_t timeout_ms) {
    BARRIER();
    t_sink = dev + ts + stream + (uint64_t)(int64_t)timeout_ms;
    return hal_work();
}

/* ---- driver-side happenings ---- */
EXPORT void devmm_alloc_done(uint32_t dev, uint64_t size, uint64_t va, int32_t ret, uint64_t free_bytes,
                             uint64_t largest_free) {
    BARRIER();
    t_sink = dev + size + va + (uint64_t)(int64_t)ret + free_bytes + largest_free;
}

EXPORT void trs_logic_cq_enque(uint32_t dev, uint32_t stream, uint32_t task, uint32_t errcode) {
    BARRIER();
    t_sink = dev + stream + task + errcode;
}

EXPORT void irq_handler_entry(uint32_t dev, uint32_t irq, const char *name) {
    BARRIER();
    t_sink = dev + irq + (uint64_t)(uintptr_t)name;
}

EXPORT void irq_handler_exit(uint32_t dev, uint32_t irq, int32_t ret) {
    BARRIER();
    t_sink = dev + irq + (uint64_t)(int64_t)ret;
}

EXPORT void drv_timeout(uint32_t dev, uint32_t kind, uint32_t chan, uint64_t wait_us) {
    BARRIER();
    t_sink = dev + kind + chan + wait_us;
}

EXPORT void hb_report_heart_beat_lost_event(uint32_t dev, uint32_t lost_count) {
    BARRIER();
    t_sink = dev + lost_count;
}

EXPORT void dms_event_report(uint32_t dev, uint32_t event_id, uint32_t ce_count, uint32_t uce_count,
                             int32_t temp_c) {
    BARRIER();
    t_sink = dev + event_id + ce_count + uce_count + (uint64_t)(int64_t)temp_c;
}

EXPORT void devdrv_reset_step(uint32_t dev, uint32_t step, const char *step_name, int32_t ret) {
    BARRIER();
    t_sink = dev + step + (uint64_t)(uintptr_t)step_name + (uint64_t)(int64_t)ret;
}

/* ---- actions ---- */
enum {
    F_halMemAlloc, F_halMemFree, F_halSqTaskSend, F_halCqReportRecv, F_devmm_alloc_done,
    F_trs_logic_cq_enque, F_irq_handler_entry, F_irq_handler_exit, F_drv_timeout,
    F_hb_report_heart_beat_lost_event, F_dms_event_report, F_devdrv_reset_step, F_COUNT
};

static const char *const FUNC_NAMES[F_COUNT] = {
    "halMemAlloc", "halMemFree", "halSqTaskSend", "halCqReportRecv", "devmm_alloc_done",
    "trs_logic_cq_enque", "irq_handler_entry", "irq_handler_exit", "drv_timeout",
    "hb_report_heart_beat_lost_event", "dms_event_report", "devdrv_reset_step",
};

struct action {
    uint64_t t_ns, delay_ns, a[6];
    int32_t ret, after;
    int func, thread;
    unsigned flags;
    char *str;
    uint64_t start, end;
    int32_t got;
    int tid, cpu_in, cpu_out;
    int awaited;     /* a later action waits for this one */
    atomic_int done; /* set (under g_mu) once it returned, when awaited */
};

static struct action *g_xs;
static uint64_t g_t0;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_done_cv = PTHREAD_COND_INITIALIZER;

static int func_id(const char *name) {
    for (int i = 0; i < F_COUNT; i++)
        if (strcmp(name, FUNC_NAMES[i]) == 0)
            return i;
    return -1;
}

/* ---- -H LIB: the real-ABI library ---- */
struct real_hal {
    sim_hal_next_fn next;
    int (*mem_alloc)(void **pp, unsigned long long size, unsigned long long flag);
    int (*mem_free)(void *pp);
    int (*sq_task_send)(uint32_t dev, struct sim_task_send_info *info);
    int (*cq_report_recv)(uint32_t dev, struct sim_report_recv_info *info);
    int (*sq_mem_get)(uint32_t dev, struct sim_sq_mem_get_input *in, struct sim_sq_mem_get_output *out);
    int (*sq_msg_send)(uint32_t dev, struct sim_sq_msg_info *info);
};

static struct real_hal g_real;
static int g_use_real;
static int g_ts_layout; /* -T ts */
static pthread_mutex_t g_sq_lock = PTHREAD_MUTEX_INITIALIZER;

static int open_real(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "npu-sim: cannot load %s: %s\n", path, dlerror());
        return -1;
    }
    *(void **)&g_real.next = dlsym(lib, "npu_sim_hal_next");
    *(void **)&g_real.mem_alloc = dlsym(lib, "halMemAlloc");
    *(void **)&g_real.mem_free = dlsym(lib, "halMemFree");
    *(void **)&g_real.sq_task_send = dlsym(lib, "halSqTaskSend");
    *(void **)&g_real.cq_report_recv = dlsym(lib, "halCqReportRecv");
    *(void **)&g_real.sq_mem_get = dlsym(lib, "halSqMemGet");
    *(void **)&g_real.sq_msg_send = dlsym(lib, "halSqMsgSend");
    if (!g_real.next || !g_real.mem_alloc || !g_real.mem_free || !g_real.sq_task_send || !g_real.cq_report_recv ||
        !g_real.sq_mem_get || !g_real.sq_msg_send) {
        fprintf(stderr, "npu-sim: %s lacks a HAL function or npu_sim_hal_next\n", path);
        return -1;
    }
    g_use_real = 1;
    return 0;
}

static int32_t call_real_send(const struct action *x) {
    uint8_t sqe[SIM_SQE_SIZE] = {0};
    struct sim_sqe_header hdr = {0};
    hdr.stream_id = (uint16_t)x->a[2];
    hdr.task_id = (uint16_t)x->a[3];
    memcpy(sqe, &hdr, sizeof(hdr));
    struct sim_task_send_info info = {0};
    info.ts_id = (uint32_t)x->a[1];
    info.sq_id = (uint32_t)x->a[4];
    info.sqe_addr = sqe;
    info.sqe_num = 1;
    g_real.next(x->ret, x->delay_ns, x->a[5]);
    return g_real.sq_task_send((uint32_t)x->a[0], &info);
}

static int32_t call_real_msg_send(const struct action *x) {
    struct sim_sq_mem_get_input in = {0};
    struct sim_sq_mem_get_output out = {0};
    in.ts_id = (uint32_t)x->a[1];
    in.sq_id = (uint32_t)x->a[4];
    in.cmd_count = 1;
    pthread_mutex_lock(&g_sq_lock);
    g_real.next(0, 0, x->a[5]);
    int32_t ret = g_real.sq_mem_get((uint32_t)x->a[0], &in, &out);
    if (ret == 0) {
        struct sim_ts_command_header cmd = {(uint16_t)x->a[2], (uint16_t)x->a[3]};
        memset((void *)out.cmd_ptr, 0, SIM_SQE_SIZE);
        memcpy((void *)out.cmd_ptr, &cmd, sizeof(cmd));
        struct sim_sq_msg_info info = {0};
        info.ts_id = in.ts_id;
        info.sq_id = in.sq_id;
        info.cmd_count = out.cmd_count;
        info.report_count = 1;
        g_real.next(x->ret, x->delay_ns, 0);
        ret = g_real.sq_msg_send((uint32_t)x->a[0], &info);
    }
    pthread_mutex_unlock(&g_sq_lock);
    return ret;
}

static int32_t call_real_recv(const struct action *x) {
    uint8_t cqe[8 * 16] = {0};
    struct sim_report_recv_info info = {0};
    info.ts_id = (uint32_t)x->a[1];
    info.stream_id = (uint32_t)x->a[2];
    info.timeout = (int32_t)x->a[3];
    info.task_id = (uint32_t)x->a[4];
    info.cq_id = (uint32_t)x->a[5];
    info.cqe_addr = cqe;
    info.cqe_num = 8;
    g_real.next(x->ret < 0 ? x->ret : 0, x->delay_ns, x->ret < 0 ? 0 : (uint64_t)x->ret);
    return g_real.cq_report_recv((uint32_t)x->a[0], &info);
}

static int32_t call_real(const struct action *x) {
    void *p = NULL;
    switch (x->func) {
    case F_halMemAlloc:
        g_real.next(x->ret, x->delay_ns, x->a[3]);
        return g_real.mem_alloc(&p, x->a[1], (x->a[2] & ~SIM_MEM_DEVID_MASK) | (x->a[0] & SIM_MEM_DEVID_MASK));
    case F_halMemFree:
        g_real.next(x->ret, x->delay_ns, 0);
        return g_real.mem_free((void *)(uintptr_t)x->a[1]);
    case F_halSqTaskSend: return g_ts_layout ? call_real_msg_send(x) : call_real_send(x);
    default: return call_real_recv(x);
    }
}

static int32_t call_hal(struct action *x) {
    if (g_use_real)
        return call_real(x);
    t_ret = x->ret;
    t_delay_ns = x->delay_ns;
    t_flags = x->flags;
    switch (x->func) {
    case F_halMemAlloc: return halMemAlloc((uint32_t)x->a[0], x->a[1], x->a[2]);
    case F_halMemFree: return halMemFree((uint32_t)x->a[0], x->a[1]);
    case F_halSqTaskSend:
        return halSqTaskSend((uint32_t)x->a[0], (uint32_t)x->a[1], (uint32_t)x->a[2], (uint32_t)x->a[3]);
    default:
        return halCqReportRecv((uint32_t)x->a[0], (uint32_t)x->a[1], (uint32_t)x->a[2], (int32_t)x->a[3]);
    }
}

static void call_driver(struct action *x) {
    uint32_t d = (uint32_t)x->a[0];
    switch (x->func) {
    case F_devmm_alloc_done:
        devmm_alloc_done(d, x->a[1], x->a[2], (int32_t)x->a[3], x->a[4], x->a[5]);
        break;
    case F_trs_logic_cq_enque:
        trs_logic_cq_enque(d, (uint32_t)x->a[1], (uint32_t)x->a[2], (uint32_t)x->a[3]);
        break;
    case F_irq_handler_entry: irq_handler_entry(d, (uint32_t)x->a[1], x->str); break;
    case F_irq_handler_exit: irq_handler_exit(d, (uint32_t)x->a[1], (int32_t)x->a[2]); break;
    case F_drv_timeout: drv_timeout(d, (uint32_t)x->a[1], (uint32_t)x->a[2], x->a[3]); break;
    case F_hb_report_heart_beat_lost_event: hb_report_heart_beat_lost_event(d, (uint32_t)x->a[1]); break;
    case F_dms_event_report:
        dms_event_report(d, (uint32_t)x->a[1], (uint32_t)x->a[2], (uint32_t)x->a[3], (int32_t)x->a[4]);
        break;
    default: devdrv_reset_step(d, (uint32_t)x->a[1], x->str, (int32_t)x->a[2]); break;
    }
}

static void perform(struct action *x) {
    x->tid = (int)syscall(SYS_gettid);
    x->cpu_in = sched_getcpu();
    if (x->func <= F_halCqReportRecv) {
        x->start = now_ns();
        x->got = call_hal(x);
        x->end = now_ns();
    } else {
        x->start = now_ns();
        call_driver(x);
        x->end = now_ns();
        x->got = 0;
    }
    x->cpu_out = sched_getcpu();
}

static void wait_returned(int32_t index) {
    if (index < 0)
        return;
    struct action *d = &g_xs[index];
    if (atomic_load_explicit(&d->done, memory_order_acquire))
        return;
    pthread_mutex_lock(&g_mu);
    while (!atomic_load_explicit(&d->done, memory_order_acquire))
        pthread_cond_wait(&g_done_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
}

static void mark_returned(struct action *x) {
    if (!x->awaited)
        return;
    pthread_mutex_lock(&g_mu);
    atomic_store_explicit(&x->done, 1, memory_order_release);
    pthread_cond_broadcast(&g_done_cv);
    pthread_mutex_unlock(&g_mu);
}

static void keep_away(const struct action *x) {
    if (!(x->flags & F_AWAY) || x->after < 0 || !g_pinned)
        return;
    int busy = g_xs[x->after].cpu_out;
    if (t_self->cpu == busy)
        pin(t_self, next_cpu(busy));
}

static void run_action(struct action *x) {
    wait_returned(x->after);
    sleep_until(g_t0 + x->t_ns);
    keep_away(x);
    perform(x);
    mark_returned(x);
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    t_self = w;
    if (g_pinned) {
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* pinned threads sleep more: wake on time */
        pin(w, g_cpus[w->index % g_ncpus]);
    }
    for (size_t i = 0; i < w->count; i++)
        run_action(&g_xs[w->items[i]]);
    return NULL;
}

/* ---- the migrator: asks every thread but thread 0 to move to the next CPU, every g_migrate_ns ---- */
static pthread_cond_t g_stop_cv;
static int g_stopping;

static void *migrator_main(void *arg) {
    (void)arg;
    uint64_t next = g_t0;
    pthread_mutex_lock(&g_mu);
    for (unsigned long tick = 1; !g_stopping; tick++) {
        next += g_migrate_ns;
        struct timespec ts = {(time_t)(next / 1000000000ULL), (long)(next % 1000000000ULL)};
        while (!g_stopping && pthread_cond_timedwait(&g_stop_cv, &g_mu, &ts) == 0) {
        }
        for (int i = 1; i < g_nthreads; i++)
            atomic_store(&g_workers[i].want, g_cpus[(size_t)(i + tick) % (size_t)g_ncpus]);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static int start_migrator(pthread_t *handle) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g_stop_cv, &attr);
    pthread_condattr_destroy(&attr);
    return pthread_create(handle, NULL, migrator_main, NULL);
}

static void stop_migrator(pthread_t handle) {
    pthread_mutex_lock(&g_mu);
    g_stopping = 1;
    pthread_cond_broadcast(&g_stop_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(handle, NULL);
}

/* ---- plan in, results out ---- */
static int parse_line(char *line, struct action *x, size_t index) {
    char fname[64];
    long long ret, after;
    int used = 0;
    int n = sscanf(line, "%" SCNu64 " %d %lld %u %63s %lld %" SCNu64 " %" SCNi64 " %" SCNi64 " %" SCNi64
                   " %" SCNi64 " %" SCNi64 " %" SCNi64 " %n",
                   &x->t_ns, &x->thread, &after, &x->flags, fname, &ret, &x->delay_ns, (int64_t *)&x->a[0],
                   (int64_t *)&x->a[1], (int64_t *)&x->a[2], (int64_t *)&x->a[3], (int64_t *)&x->a[4],
                   (int64_t *)&x->a[5], &used);
    if (n != 13 || used == 0)
        return -1;
    if (x->thread < 0 || x->thread >= MAX_THREADS || after < -1 || after >= (long long)index || x->flags > 3)
        return -1;
    x->ret = (int32_t)ret;
    x->after = (int32_t)after;
    x->func = func_id(fname);
    char *s = line + used;
    s[strcspn(s, "\n")] = '\0';
    x->str = strdup(s);
    return x->func < 0 || x->str == NULL ? -1 : 0;
}

static struct action *read_plan(const char *path, size_t *count) {
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1024, n = 0;
    struct action *xs = calloc(cap, sizeof(*xs));
    char *line = NULL;
    size_t len = 0;
    while (xs && getline(&line, &len, f) > 0) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (n == cap) {
            cap *= 2;
            struct action *more = realloc(xs, cap * sizeof(*xs));
            if (!more) {
                free(xs);
                xs = NULL;
                break;
            }
            xs = more;
        }
        memset(&xs[n], 0, sizeof(xs[n]));
        if (parse_line(line, &xs[n], n) != 0) {
            fprintf(stderr, "npu-sim: bad plan line %zu: %s", n + 1, line);
            free(xs);
            xs = NULL;
            break;
        }
        n++;
    }
    free(line);
    fclose(f);
    *count = n;
    return xs;
}

static int write_out(const char *path, const struct action *xs, size_t n) {
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "cpus %d", g_ncpus);
    for (int i = 0; i < g_ncpus; i++)
        fprintf(f, " %d", g_cpus[i]);
    fprintf(f, " pinned %d\n", g_pinned);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%" PRIu64 " %" PRIu64 " %d %d %d %d\n", xs[i].start, xs[i].end, xs[i].got, xs[i].tid,
                xs[i].cpu_in, xs[i].cpu_out);
    return fclose(f);
}

static void find_cpus(void) {
    cpu_set_t set;
    g_ncpus = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                g_cpus[g_ncpus++] = c;
    if (g_ncpus == 0)
        g_cpus[g_ncpus++] = sched_getcpu();
}

/* Threads, their action lists, which actions are awaited; and whether to pin. */
static int setup(struct action *xs, size_t n) {
    int any_flag = 0;
    size_t counts[MAX_THREADS] = {0};
    for (size_t i = 0; i < n; i++) {
        if (xs[i].thread >= g_nthreads)
            g_nthreads = xs[i].thread + 1;
        if (xs[i].after >= 0)
            xs[xs[i].after].awaited = 1;
        any_flag |= xs[i].flags != 0;
        counts[xs[i].thread]++;
    }
    for (int t = 0; t < g_nthreads; t++) {
        g_workers[t].index = t;
        g_workers[t].cpu = -1;
        atomic_init(&g_workers[t].want, -1);
        g_workers[t].items = malloc((counts[t] ? counts[t] : 1) * sizeof(size_t));
        if (!g_workers[t].items)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        struct worker *w = &g_workers[xs[i].thread];
        w->items[w->count++] = i;
    }
    find_cpus();
    g_pinned = g_ncpus > 1 && (g_nthreads > 1 || g_migrate_ns > 0 || any_flag);
    if (g_pinned)
        g_spin_ns = PINNED_SPIN_NS;
    else
        g_migrate_ns = 0; /* nothing to move */
    return 0;
}

static int run_threads(void) {
    pthread_t migrator;
    int migrating = g_pinned && g_migrate_ns > 0 && g_nthreads > 1;
    if (migrating) {
        int rc = start_migrator(&migrator);
        if (rc != 0) {
            errno = rc;
            return -1;
        }
    }
    for (int t = 1; t < g_nthreads; t++) {
        int rc = pthread_create(&g_workers[t].handle, NULL, worker_main, &g_workers[t]);
        if (rc != 0) {
            errno = rc;
            return -1; /* main exits: the threads already started end with the process */
        }
    }
    worker_main(&g_workers[0]);
    for (int t = 1; t < g_nthreads; t++)
        pthread_join(g_workers[t].handle, NULL);
    if (migrating)
        stop_migrator(migrator);
    return 0;
}

static int parse_args(int argc, char **argv, const char **plan, const char **out, const char **lib) {
    int i = 1;
    while (i + 1 < argc && argv[i][0] == '-' && argv[i][1] != '\0' && argv[i][2] == '\0') {
        if (argv[i][1] == 'm') {
            char *end = NULL;
            errno = 0;
            unsigned long long us = strtoull(argv[i + 1], &end, 10);
            if (errno || end == argv[i + 1] || *end || argv[i + 1][0] == '-' || us > 60000000ULL)
                return -1;
            g_migrate_ns = us * 1000ULL;
        } else if (argv[i][1] == 'H') {
            *lib = argv[i + 1];
        } else if (argv[i][1] == 'T' && (strcmp(argv[i + 1], "ts") == 0 || strcmp(argv[i + 1], "stars") == 0)) {
            g_ts_layout = strcmp(argv[i + 1], "ts") == 0;
        } else {
            return -1;
        }
        i += 2;
    }
    if (argc - i != 2)
        return -1;
    *plan = argv[i];
    *out = argv[i + 1];
    return 0;
}

int main(int argc, char **argv) {
    const char *plan_path, *out_path, *lib_path = NULL;
    if (parse_args(argc, argv, &plan_path, &out_path, &lib_path) != 0) {
        fprintf(stderr, "usage: npu-sim [-m MIGRATE_US] [-H LIB [-T stars|ts]] PLAN OUT  (MIGRATE_US: 0..60000000)\n");
        return 2;
    }
    if (lib_path && open_real(lib_path) != 0)
        return 2;
    size_t n = 0;
    g_xs = read_plan(plan_path, &n);
    if (!g_xs) {
        fprintf(stderr, "npu-sim: cannot read plan %s\n", plan_path);
        return 2;
    }
    g_t0 = now_ns();
    if (setup(g_xs, n) != 0 || run_threads() != 0) {
        fprintf(stderr, "npu-sim: cannot start its threads: %s\n", strerror(errno));
        return 1;
    }
    if (write_out(out_path, g_xs, n) != 0) {
        fprintf(stderr, "npu-sim: cannot write %s\n", out_path);
        return 1;
    }
    return 0;
}
