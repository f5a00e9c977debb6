/* npu-sim: the simulated NPU executor (see npu_trace/sim/__init__.py for the ABI).
 *
 * usage: npu-sim PLAN OUT
 * PLAN: one action per line:  t_ns func ret delay_ns a0 a1 a2 a3 a4 a5 str
 *   t_ns      start offset from the executor's own start (CLOCK_MONOTONIC)
 *   func      one of the exported function names below
 *   ret       return value a HAL call must return (ignored for void functions)
 *   delay_ns  latency injected inside a HAL call
 *   a0..a5    numeric arguments in C order, strings left out (decimal, may be negative)
 *   str       the string argument (rest of the line), "-" when the function has none
 * OUT: one line per action: start_ns end_ns ret   (CLOCK_MONOTONIC just before / after the call)
 * All scenario logic lives in Python: this program only waits, calls and timestamps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((noinline, used, visibility("default")))
#define BARRIER() asm volatile("" ::: "memory")
#define SPIN_LIMIT_NS 2000000ULL

static volatile int32_t g_ret;
static volatile uint64_t g_delay_ns;
static volatile uint64_t g_sink;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t deadline) {
    uint64_t now = now_ns();
    if (deadline > now + SPIN_LIMIT_NS) {
        uint64_t wake = deadline - SPIN_LIMIT_NS / 2;
        struct timespec ts = {(time_t)(wake / 1000000000ULL), (long)(wake % 1000000000ULL)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
        }
    }
    while (now_ns() < deadline) {
        BARRIER();
    }
}

static __attribute__((noinline)) int32_t hal_work(void) {
    uint64_t delay = g_delay_ns;
    if (delay)
        sleep_until(now_ns() + delay);
    BARRIER();
    return g_ret;
}

/* ---- user-space HAL (libascend_hal.so names) ---- */
EXPORT int halMemAlloc(uint32_t dev, uint64_t size, uint64_t flag) {
    BARRIER();
    g_sink = dev + size + flag;
    return hal_work();
}

EXPORT int halMemFree(uint32_t dev, uint64_t va) {
    BARRIER();
    g_sink = dev + va;
    return hal_work();
}

EXPORT int halSqTaskSend(uint32_t dev, uint32_t ts, uint32_t stream, uint32_t task) {
    BARRIER();
    g_sink = dev + ts + stream + task;
    return hal_work();
}

EXPORT int halCqReportRecv(uint32_t dev, uint32_t ts, uint32_t stream, int32_t timeout_ms) {
    BARRIER();
    g_sink = dev + ts + stream + (uint64_t)(int64_t)timeout_ms;
    return hal_work();
}

/* ---- driver-side happenings ---- */
EXPORT void devmm_alloc_done(uint32_t dev, uint64_t size, uint64_t va, int32_t ret, uint64_t free_bytes,
                             uint64_t largest_free) {
    BARRIER();
    g_sink = dev + size + va + (uint64_t)(int64_t)ret + free_bytes + largest_free;
}

EXPORT void trs_logic_cq_enque(uint32_t dev, uint32_t stream, uint32_t task, uint32_t errcode) {
    BARRIER();
    g_sink = dev + stream + task + errcode;
}

EXPORT void irq_handler_entry(uint32_t dev, uint32_t irq, const char *name) {
    BARRIER();
    g_sink = dev + irq + (uint64_t)(uintptr_t)name;
}

EXPORT void irq_handler_exit(uint32_t dev, uint32_t irq, int32_t ret) {
    BARRIER();
    g_sink = dev + irq + (uint64_t)(int64_t)ret;
}

EXPORT void drv_timeout(uint32_t dev, uint32_t kind, uint32_t chan, uint64_t wait_us) {
    BARRIER();
    g_sink = dev + kind + chan + wait_us;
}

EXPORT void hb_report_heart_beat_lost_event(uint32_t dev, uint32_t lost_count) {
    BARRIER();
    g_sink = dev + lost_count;
}

EXPORT void dms_event_report(uint32_t dev, uint32_t event_id, uint32_t ce_count, uint32_t uce_count,
                             int32_t temp_c) {
    BARRIER();
    g_sink = dev + event_id + ce_count + uce_count + (uint64_t)(int64_t)temp_c;
}

EXPORT void devdrv_reset_step(uint32_t dev, uint32_t step, const char *step_name, int32_t ret) {
    BARRIER();
    g_sink = dev + step + (uint64_t)(uintptr_t)step_name + (uint64_t)(int64_t)ret;
}

/* ---- executor ---- */
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
    int32_t ret;
    int func;
    char *str;
    uint64_t start, end;
    int32_t got;
};

static int func_id(const char *name) {
    for (int i = 0; i < F_COUNT; i++)
        if (strcmp(name, FUNC_NAMES[i]) == 0)
            return i;
    return -1;
}

static int32_t call_hal(struct action *x) {
    g_ret = x->ret;
    g_delay_ns = x->delay_ns;
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
    if (x->func <= F_halCqReportRecv) {
        x->start = now_ns();
        x->got = call_hal(x);
        x->end = now_ns();
        return;
    }
    x->start = now_ns();
    call_driver(x);
    x->end = now_ns();
    x->got = 0;
}

static int parse_line(char *line, struct action *x) {
    char fname[64];
    long long ret;
    int used = 0;
    int n = sscanf(line, "%" SCNu64 " %63s %lld %" SCNu64 " %" SCNi64 " %" SCNi64 " %" SCNi64 " %" SCNi64
                   " %" SCNi64 " %" SCNi64 " %n",
                   &x->t_ns, fname, &ret, &x->delay_ns, (int64_t *)&x->a[0], (int64_t *)&x->a[1],
                   (int64_t *)&x->a[2], (int64_t *)&x->a[3], (int64_t *)&x->a[4], (int64_t *)&x->a[5], &used);
    if (n != 10 || used == 0)
        return -1;
    x->ret = (int32_t)ret;
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
            xs = realloc(xs, cap * sizeof(*xs));
            if (!xs)
                break;
        }
        memset(&xs[n], 0, sizeof(xs[n]));
        if (parse_line(line, &xs[n]) != 0) {
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
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%" PRIu64 " %" PRIu64 " %d\n", xs[i].start, xs[i].end, xs[i].got);
    return fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: npu-sim PLAN OUT\n");
        return 2;
    }
    size_t n = 0;
    struct action *xs = read_plan(argv[1], &n);
    if (!xs) {
        fprintf(stderr, "npu-sim: cannot read plan %s\n", argv[1]);
        return 2;
    }
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        sleep_until(t0 + xs[i].t_ns);
        perform(&xs[i]);
    }
    if (write_out(argv[2], xs, n) != 0) {
        fprintf(stderr, "npu-sim: cannot write %s\n", argv[2]);
        return 1;
    }
    return 0;
}
