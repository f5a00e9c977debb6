/* The latency detector's run of samples of one (device, op), compiled (npu_trace.detectors.latency): one pass in
 * time order, each sample met with the thresholds in force before it, as LatencyDetector._sample_at meets it.
 *
 * latency.py holds the rules and the numpy twin (LatencyDetector._scan_run), whose results are identical.
 *
 * scan(lat, window, seen, baseline, has_baseline, w, refresh, warmup, floor, k_int, k_float, k_is_int, absolute,
 *      has_absolute, adaptive_on, spike_at, spike_adaptive, spike_baseline, spike_flags, tail)
 *   -> (spikes, seen, baseline or None, tail_len)
 *   lat        int64, n: the samples' latencies, in time order
 *   window     int64, at most w: the learned latencies the baseline is taken from (oldest first)
 *   seen, baseline, has_baseline: the (device, op)'s samples learned so far and its baseline (if it has one)
 *   w, refresh, warmup, floor: the window's size, the baseline's refresh, the warm-up, the adaptive floor
 *   k_int or k_float (k_is_int says which): the adaptive factor, an integer (exact) or a float (as Python's
 *            int(k * baseline): the product in double, truncated)
 *   absolute, has_absolute: the absolute threshold, if any; adaptive_on: the adaptive rule applies
 *   spike_at, spike_adaptive, spike_baseline int64, n; spike_flags uint8, n: written, each spike's sample, its
 *            adaptive threshold (flag 1: there is one) and the baseline in force (flag 2: there is one)
 *   tail       int64, w: written, the window after the run (its length returned)
 * A sample that learns joins the window; every `refresh` learned samples (and the first, while there is no
 * baseline) the baseline becomes the median of the window (sorted(window)[len // 2]). A sample over either
 * threshold is a spike; a spike learns only during the warm-up (seen < warmup).
 *
 * The median of a refresh is taken only when something needs it (a sample above the floor, a spike, the end):
 * the learned values are all kept, so the window of any refresh can be read back.
 * Arrays of other sizes, w or refresh below 1, or an adaptive threshold outside int64 (k x baseline) is a
 * ValueError (the caller then takes the numpy twin, which the tests hold equal).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* the k-th smallest of v[0..n) (v is reordered) */
static int64_t select_kth(int64_t *v, Py_ssize_t n, Py_ssize_t k)
{
    Py_ssize_t lo = 0, hi = n - 1;
    while (hi > lo) {
        if (hi - lo < 16) { /* a short range: insertion sort */
            for (Py_ssize_t i = lo + 1; i <= hi; i++) {
                int64_t x = v[i];
                Py_ssize_t j = i - 1;
                while (j >= lo && v[j] > x) {
                    v[j + 1] = v[j];
                    j--;
                }
                v[j + 1] = x;
            }
            return v[k];
        }
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int64_t a = v[lo], b = v[mid], c = v[hi];
        int64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                int64_t t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return v[k];
    }
    return v[k];
}

typedef struct {
    const int64_t *learned; /* the window before the run, then every sample learned */
    Py_ssize_t w;
    int64_t *scratch;       /* w values */
    int has;                /* a baseline exists */
    int64_t value;          /* its value, once taken */
    Py_ssize_t pending;     /* >= 0: the baseline is the median of the w values learned before this position */
} Baseline;

static int64_t baseline_value(Baseline *b)
{
    if (b->pending >= 0) {
        Py_ssize_t from = b->pending > b->w ? b->pending - b->w : 0, len = b->pending - from;
        memcpy(b->scratch, b->learned + from, (size_t)len * 8);
        b->value = select_kth(b->scratch, len, len / 2);
        b->pending = -1;
    }
    return b->value;
}

/* max(floor, int(k * baseline)); 0 where it is outside int64 */
static int adaptive_of(int64_t base, int64_t floor, long long k_int, double k_float, int k_is_int, int64_t *out)
{
    int64_t thr;
    if (k_is_int) {
        long long prod;
        if (__builtin_mul_overflow((long long)base, k_int, &prod))
            return 0;
        thr = prod;
    } else {
        double prod = k_float * (double)base;
        if (!(prod > -9.2e18 && prod < 9.2e18))
            return 0;
        thr = (int64_t)prod;
    }
    *out = thr > floor ? thr : floor;
    return 1;
}

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer lat, window, at, adaptive, base_out, flags, tail;
    long long seen, base0, w, refresh, warmup, floor, k_int, absolute;
    double k_float;
    int has_base, k_is_int, has_abs, adaptive_on;
    if (!PyArg_ParseTuple(args, "y*y*LLpLLLLLdpLppw*w*w*w*w*", &lat, &window, &seen, &base0, &has_base, &w,
                          &refresh, &warmup, &floor, &k_int, &k_float, &k_is_int, &absolute, &has_abs,
                          &adaptive_on, &at, &adaptive, &base_out, &flags, &tail))
        return NULL;
    Py_ssize_t n = lat.len / 8, w0 = window.len / 8;
    int64_t *learned = NULL, *scratch = NULL;
    PyObject *result = NULL;
    int sizes = lat.len % 8 == 0 && window.len % 8 == 0 && w >= 1 && refresh >= 1 && w0 <= w
                && at.len == lat.len && adaptive.len == lat.len && base_out.len == lat.len && flags.len == n
                && tail.len == w * 8;
    if (!sizes) {
        PyErr_SetString(PyExc_ValueError, "the samples' arrays, the window or the rule's sizes do not agree");
        goto done;
    }
    learned = PyMem_Malloc((size_t)(w0 + n) * 8 + 8);
    scratch = PyMem_Malloc((size_t)w * 8 + 8);
    if (learned == NULL || scratch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(learned, window.buf, (size_t)window.len);
    Py_ssize_t len = w0, spikes = 0;
    Baseline b = {learned, (Py_ssize_t)w, scratch, has_base, base0, -1};
    const int64_t *x = lat.buf;
    int64_t *s_at = at.buf, *s_adaptive = adaptive.buf, *s_base = base_out.buf;
    uint8_t *s_flags = flags.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = x[i];
        int spike = has_abs && v > absolute;
        int64_t thr = 0;
        int has_thr = 0;
        /* the adaptive threshold is never below floor: only a sample above it can pass it (a spike's finding
         * states it all the same) */
        if (adaptive_on && b.has && seen >= warmup && (v > floor || spike)) {
            if (!adaptive_of(baseline_value(&b), floor, k_int, k_float, k_is_int, &thr)) {
                PyErr_SetString(PyExc_ValueError, "an adaptive threshold outside int64");
                goto done;
            }
            has_thr = 1;
            spike = spike || v > thr;
        }
        if (spike) {
            s_at[spikes] = i;
            s_adaptive[spikes] = thr;
            s_base[spikes] = b.has ? baseline_value(&b) : 0;
            s_flags[spikes] = (uint8_t)(has_thr | (b.has ? 2 : 0));
            spikes++;
            if (seen >= warmup)
                continue; /* past the warm-up a spike does not learn */
        }
        learned[len++] = v;
        seen++;
        if (seen % refresh == 0 || !b.has) {
            b.has = 1;
            b.pending = len;
        }
    }
    {
        Py_ssize_t from = len > w ? len - (Py_ssize_t)w : 0;
        memcpy(tail.buf, learned + from, (size_t)(len - from) * 8);
        PyObject *base = Py_None;
        if (b.has)
            base = PyLong_FromLongLong(baseline_value(&b));
        else
            Py_INCREF(Py_None);
        if (base != NULL)
            result = Py_BuildValue("nLNn", spikes, seen, base, len - from);
    }
done:
    PyMem_Free(learned);
    PyMem_Free(scratch);
    PyBuffer_Release(&lat);
    PyBuffer_Release(&window);
    PyBuffer_Release(&at);
    PyBuffer_Release(&adaptive);
    PyBuffer_Release(&base_out);
    PyBuffer_Release(&flags);
    PyBuffer_Release(&tail);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS, "A run of one (device, op)'s samples (see npu_trace.detectors.latency)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spikes", "The latency detector's runs of samples, compiled (npu_trace.detectors.latency).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spikes(void)
{
    return PyModule_Create(&module);
}
