/* The stable order of integer keys in a small range, by counting, and each row's previous row of its key
 * (npu_trace.pipeline.order wraps them).
 *
 * counting_order(key, low, span, out): key is int64 (C-contiguous), every value in [low, low + span); out
 * (int64, as many as key) receives the row numbers in the order argsort(kind="stable") gives: each key's rows
 * in row order, the keys ascending. Two passes over the keys and one over the range (span counters), the GIL
 * released meanwhile. A key outside the range is a ValueError (out is then left partly written).
 *
 * previous(key, prev, last) -> the count of distinct keys: key int64, n (any values); prev int64, n: written,
 * the row before each row with the same key (-1: none); last uint8, n: written, 1 where no later row has the
 * row's key. One pass in row order through a table of the keys seen (open addressing, grown as keys come:
 * a block's threads and ops, a few hundred), the GIL released meanwhile. Arrays of other sizes are a
 * ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *py_counting_order(PyObject *self, PyObject *args)
{
    Py_buffer key, out;
    long long low;
    Py_ssize_t span;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Lnw*:counting_order", &key, &low, &span, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = key.len / 8;
    int64_t *start = NULL;
    int bad = 0;
    if (key.len % 8 || out.len != key.len || span < 1 || (size_t)span > PY_SSIZE_T_MAX / sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "counting_order: int64 keys and as many int64 rows, span >= 1");
        goto done;
    }
    if ((start = PyMem_RawCalloc((size_t)span, sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *k = (const int64_t *)key.buf;
    int64_t *o = (int64_t *)out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) { /* how many rows each key has */
        uint64_t at = (uint64_t)k[i] - (uint64_t)low;
        if (at >= (uint64_t)span) {
            bad = 1;
            break;
        }
        start[at]++;
    }
    if (!bad) {
        int64_t pos = 0; /* where each key's rows begin */
        for (Py_ssize_t v = 0; v < span; v++) {
            int64_t count = start[v];
            start[v] = pos;
            pos += count;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            o[start[(uint64_t)k[i] - (uint64_t)low]++] = (int64_t)i;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "counting_order: a key lies outside [low, low + span)");
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_RawFree(start);
    PyBuffer_Release(&key);
    PyBuffer_Release(&out);
    return result;
}

typedef struct {
    int64_t key;
    int64_t row; /* the key's latest row; -1: the slot is free */
} Seen;

static size_t slot_of(int64_t key, size_t mask)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

/* the table twice as large, every key moved over; 0 when no memory */
static int grow(Seen **table, size_t *mask)
{
    size_t size = (*mask + 1) * 2;
    Seen *bigger = PyMem_RawMalloc(size * sizeof(Seen));
    if (bigger == NULL)
        return 0;
    for (size_t j = 0; j < size; j++)
        bigger[j].row = -1;
    for (size_t j = 0; j <= *mask; j++) {
        if ((*table)[j].row < 0)
            continue;
        size_t at = slot_of((*table)[j].key, size - 1);
        while (bigger[at].row >= 0)
            at = (at + 1) & (size - 1);
        bigger[at] = (*table)[j];
    }
    PyMem_RawFree(*table);
    *table = bigger;
    *mask = size - 1;
    return 1;
}

static PyObject *py_previous(PyObject *self, PyObject *args)
{
    Py_buffer key, prev, last;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*w*:previous", &key, &prev, &last))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = key.len / 8, distinct = 0;
    size_t mask = 63;
    Seen *table = NULL;
    int no_memory = 0;
    if (key.len % 8 || prev.len != key.len || last.len != n) {
        PyErr_SetString(PyExc_ValueError, "previous: int64 keys, as many int64 rows and uint8 flags");
        goto done;
    }
    if ((table = PyMem_RawMalloc((mask + 1) * sizeof(Seen))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t j = 0; j <= mask; j++)
        table[j].row = -1;
    const int64_t *k = (const int64_t *)key.buf;
    int64_t *p = (int64_t *)prev.buf;
    uint8_t *l = (uint8_t *)last.buf;
    Py_BEGIN_ALLOW_THREADS
    memset(l, 1, (size_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t at = slot_of(k[i], mask);
        while (table[at].row >= 0 && table[at].key != k[i])
            at = (at + 1) & mask;
        if (table[at].row >= 0) {
            p[i] = table[at].row;
            l[table[at].row] = 0;
            table[at].row = i;
            continue;
        }
        p[i] = -1;
        table[at].key = k[i];
        table[at].row = i;
        if ((size_t)++distinct * 2 > mask + 1 && !grow(&table, &mask)) {
            no_memory = 1;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (no_memory)
        PyErr_NoMemory();
    else
        result = PyLong_FromSsize_t(distinct);
done:
    PyMem_RawFree(table);
    PyBuffer_Release(&key);
    PyBuffer_Release(&prev);
    PyBuffer_Release(&last);
    return result;
}

static PyMethodDef methods[] = {
    {"counting_order", py_counting_order, METH_VARARGS,
     "counting_order(key, low, span, out): the stable order of int64 keys in [low, low + span), into out."},
    {"previous", py_previous, METH_VARARGS,
     "previous(key, prev, last): each row's previous row of its key, and the last row of each key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_order", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__order(void) { return PyModule_Create(&module); }
