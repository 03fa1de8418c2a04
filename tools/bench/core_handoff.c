/* How far apart the first two CPUs are: the round trip of one cache line written in turn by a thread
 * pinned to CPU 0 and one pinned to CPU 1, in nanoseconds (median of 9 runs of 100,000 round trips).
 *
 * Why: a VM's two vCPUs are placed by the host, and the placement moves while the guest runs. On the
 * AMD EPYC VMs of this project the round trip is either about 50 ns (two cores sharing an L3) or about
 * 370 ns (cores on different CCDs), and the two placements favour different work: a thread pool's
 * hand-offs and shared-L3 reuse against a second memory link. peers.py records this before every
 * measurement so a 2-thread figure can be read with the placement it ran on.
 *
 * Prints one number; prints nothing and exits 2 where the process cannot run on CPUs 0 and 1. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TRIPS 100000
#define RUNS 9

static _Atomic long line __attribute__((aligned(64)));

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* the other side: answers each odd value with the next even one */
static void *answer(void *arg) {
    (void)arg;
    if (pin(1) != 0) {
        exit(2);
    }
    for (long i = 0; i < (long)TRIPS * RUNS; i++) {
        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1) {
            relax();
        }
        atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    pthread_t other;
    double ns[RUNS];
    if (pin(0) != 0 || pthread_create(&other, NULL, answer, NULL) != 0) {
        return 2;
    }
    for (int r = 0; r < RUNS; r++) {
        double start = now();
        for (long i = (long)r * TRIPS; i < (long)(r + 1) * TRIPS; i++) {
            atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2) {
                relax();
            }
        }
        ns[r] = (now() - start) * 1e9 / TRIPS;
    }
    pthread_join(other, NULL);
    qsort(ns, RUNS, sizeof ns[0], by_value);
    printf("%.1f\n", ns[RUNS / 2]);
    return 0;
}
