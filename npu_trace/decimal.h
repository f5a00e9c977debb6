/* The decimal digits of an unsigned 64-bit integer, for the compiled writers of text: the exporters' byte
 * assembler (npu_trace/export/_wire.c) and the text lines (npu_trace/sinks/_lines.c) include it.
 *
 * decimal_digits(v)        how many digits v has: from its highest bit (1233 / 4096 is just above log10(2);
 *                          v | 1 has v's digits, a power of ten above 1 being even), one comparison with a
 *                          power of ten
 * decimal_write(at, v, n)  v's n digits (n = decimal_digits(v)) at `at`, four at a time from a table of
 *                          pairs, back to front from the last (no reversal)
 * DECIMAL_PAIRS            "00" ... "99", the two digits of each number below 100
 */
#ifndef NPU_TRACE_DECIMAL_H
#define NPU_TRACE_DECIMAL_H

#include <stdint.h>
#include <string.h>

static const char DECIMAL_PAIRS[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                       "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                       "8081828384858687888990919293949596979899";

static const uint64_t DECIMAL_POWERS[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL, 1000000000ULL,
    10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL, 100000000000000ULL,
    1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL, 1000000000000000000ULL,
    10000000000000000000ULL};

static inline int decimal_digits(uint64_t v)
{
    uint64_t u = v | 1;
    int t = ((64 - __builtin_clzll(u)) * 1233) >> 12;
    return t + (u >= DECIMAL_POWERS[t]);
}

static inline void decimal_write(char *at, uint64_t v, int n)
{
    int k = n;
    while (v >= 10000) {
        uint64_t high = v / 10000;
        uint32_t four = (uint32_t)(v - high * 10000);
        k -= 4;
        memcpy(at + k, DECIMAL_PAIRS + 2 * (four / 100), 2);
        memcpy(at + k + 2, DECIMAL_PAIRS + 2 * (four % 100), 2);
        v = high;
    }
    if (v >= 100) {
        k -= 2;
        memcpy(at + k, DECIMAL_PAIRS + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10)
        memcpy(at + k - 2, DECIMAL_PAIRS + 2 * v, 2);
    else
        at[k - 1] = (char)('0' + v);
}

#endif
