/* The live workload of benchmarks.live: calls, task submits and their completions on two CPUs, made of cheap
 * syscalls whose tracepoints the benchmark's profile maps to the kinds the detectors work on.
 *
 *   gen_tasks N [rate] [cpu_a cpu_b]
 *
 * N: trace events in all (rounded down to a multiple of 6); rate: events per second, both threads together,
 * paced (0 or absent: as fast as possible); cpu_a, cpu_b: the CPUs of the two threads (default 0 and 1).
 *
 * Thread A (an application thread, on cpu_a), per unit:
 *   sched_get_priority_max(SCHED_OTHER)    a call: sys_enter_sched_get_priority_max, then its sys_exit
 *   tee(-1, dev, stream, task)             a submit: sys_enter_tee (fails with EINVAL or EBADF before it does
 *                                          anything: the tracepoint fires first, with the arguments)
 *   and hands the task over to thread B.
 * Thread B (the interrupt side, on cpu_b), per task handed over (after its submit returned):
 *   sync_file_range(-1, dev, stream, task) its completion: sys_enter_sync_file_range (EBADF likewise)
 *   sched_get_priority_max(SCHED_OTHER)    a call
 * Syscalls nothing else on these hosts makes (watched for a minute: shells call getppid and getpgrp, cat
 * fadvise64), so the trace holds the workload's events alone.
 * Each thread makes 3 events per unit. Task i has dev = i % 8, stream = (i / 8) % 8, task = (i / 64) % 65536:
 * unique among the tasks in flight (the hand-over ring holds at most 65,536).
 * Pacing: every millisecond each thread does what is due by then and sleeps until the next (clock_nanosleep
 * on an absolute time): a paced workload never spins, so it leaves the CPUs to the tracer; as fast as
 * possible, thread B spins while the ring is empty.
 * Prints one line: pid=P n=EVENTS elapsed_ns=NS cpu_ns=NS tids=A,B calls=C submits=S completes=K waits=W
 * (n = 2 calls + submits + completes; waits: times thread A found the ring full).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING 65536
#define TICK_NS 1000000LL
#define DEVICES 8
#define STREAMS 8

static long long g_units;
static double g_period_ns; /* per unit, per thread; 0: as fast as possible */
static long long g_start;
static long g_ring[RING];
static atomic_llong g_head, g_tail;
static long long g_waits;
static int g_tid[2];

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(long long t) {
    struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

/* the units due by now (all of them when not paced) */
static long long due(void) {
    if (g_period_ns <= 0)
        return g_units;
    long long n = (long long)((double)(now_ns() - g_start) / g_period_ns) + 1;
    return n < g_units ? n : g_units;
}

static void wait_tick(long long done) {
    if (g_period_ns > 0 && done < g_units)
        sleep_until(g_start + ((now_ns() - g_start) / TICK_NS + 1) * TICK_NS);
}

static void submit(long i) {
    syscall(SYS_sched_get_priority_max, SCHED_OTHER);
    syscall(SYS_tee, -1, (long)(i % DEVICES), (long)(i / DEVICES % STREAMS), (long)(i / 64 % 65536));
    while (atomic_load_explicit(&g_head, memory_order_relaxed) - atomic_load_explicit(&g_tail, memory_order_acquire)
           >= RING) {
        g_waits++;
        sched_yield();
    }
    long long h = atomic_load_explicit(&g_head, memory_order_relaxed);
    g_ring[h % RING] = i;
    atomic_store_explicit(&g_head, h + 1, memory_order_release);
}

static void complete(long i) {
    syscall(SYS_sync_file_range, -1, (long)(i % DEVICES), (long)(i / DEVICES % STREAMS), (long)(i / 64 % 65536));
    syscall(SYS_sched_get_priority_max, SCHED_OTHER);
}

static void *thread_a(void *arg) {
    pin(((int *)arg)[0]);
    g_tid[0] = (int)syscall(SYS_gettid);
    for (long long i = 0; i < g_units;) {
        for (long long n = due(); i < n; i++)
            submit((long)i);
        wait_tick(i);
    }
    return NULL;
}

static void *thread_b(void *arg) {
    pin(((int *)arg)[1]);
    g_tid[1] = (int)syscall(SYS_gettid);
    for (long long i = 0; i < g_units;) {
        long long h = atomic_load_explicit(&g_head, memory_order_acquire);
        for (; i < h; i++)
            complete(g_ring[i % RING]);
        atomic_store_explicit(&g_tail, i, memory_order_release);
        wait_tick(i);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s N [rate] [cpu_a cpu_b]\n", argv[0]);
        return 2;
    }
    g_units = atoll(argv[1]) / 6;
    double rate = argc > 2 ? atof(argv[2]) : 0.0;
    int cpus[2] = {argc > 4 ? atoi(argv[3]) : 0, argc > 4 ? atoi(argv[4]) : 1};
    g_period_ns = rate > 0 ? 6e9 / rate : 0.0; /* each unit is 3 events on each thread */
    pthread_t a, b;
    g_start = now_ns();
    if (pthread_create(&b, NULL, thread_b, cpus) || pthread_create(&a, NULL, thread_a, cpus)) {
        perror("pthread_create");
        return 1;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    long long elapsed = now_ns() - g_start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long long cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                       + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
    printf("pid=%d n=%lld elapsed_ns=%lld cpu_ns=%lld tids=%d,%d calls=%lld submits=%lld completes=%lld waits=%lld\n",
           (int)getpid(), 6 * g_units, elapsed, cpu_ns, g_tid[0], g_tid[1], 2 * g_units, g_units, g_units, g_waits);
    fflush(stdout);
    return 0;
}
