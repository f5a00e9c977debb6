/* Workload A of the ingest benchmark: N raw getpid syscalls (tracepoint syscalls:sys_enter_getpid).
 *
 *   gen_syscalls N [cpu] [rate]
 *
 * cpu: pin to that CPU with sched_setaffinity (-1: leave the affinity alone).
 * rate: calls per second, paced by busy-waiting on CLOCK_MONOTONIC (0 or absent: as fast as possible).
 * syscall(SYS_getpid) is used because a libc getpid() may be cached and never enter the kernel.
 * Prints one line: pid=<pid> n=<N> elapsed_ns=<ns> cpu_ns=<user+system ns of this process>.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s N [cpu] [rate]\n", argv[0]);
        return 2;
    }
    long long n = atoll(argv[1]);
    int cpu = argc > 2 ? atoi(argv[2]) : -1;
    double rate = argc > 3 ? atof(argv[3]) : 0.0;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            perror("sched_setaffinity");
            return 1;
        }
    }
    long long start = now_ns();
    if (rate > 0) {
        double period = 1e9 / rate;
        for (long long i = 0; i < n; i++) {
            long long due = start + (long long)(period * (double)i);
            while (now_ns() < due) {
            }
            syscall(SYS_getpid);
        }
    } else {
        for (long long i = 0; i < n; i++) syscall(SYS_getpid);
    }
    long long elapsed = now_ns() - start;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long long cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                       + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
    /* gettid, not getpid: one more getpid would be one more traced event (the main thread's tid is the pid) */
    printf("pid=%ld n=%lld elapsed_ns=%lld cpu_ns=%lld\n", (long)syscall(SYS_gettid), n, elapsed, cpu_ns);
    fflush(stdout);
    return 0;
}
