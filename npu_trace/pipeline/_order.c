/* The stable order of integer keys in a small range, by counting (npu_trace.pipeline.order wraps it).
 *
 * counting_order(key, low, span, out): key is int64 (C-contiguous), every value in [low, low + span); out
 * (int64, as many as key) receives the row numbers in the order argsort(kind="stable") gives: each key's rows
 * in row order, the keys ascending. Two passes over the keys and one over the range (span counters), the GIL
 * released meanwhile. A key outside the range is a ValueError (out is then left partly written).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"counting_order", py_counting_order, METH_VARARGS,
     "counting_order(key, low, span, out): the stable order of int64 keys in [low, low + span), into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_order", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__order(void) { return PyModule_Create(&module); }
