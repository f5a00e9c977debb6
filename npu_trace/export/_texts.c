/* The distinct byte strings of many rows, compiled (npu_trace.export.texts): each row's value found in a hash
 * table of the values seen, one pass, the GIL released while it runs.
 *
 * texts.py holds the rules and the numpy twin, distinct_py, whose results are identical.
 *
 * distinct(bufs, buf, start, length, groups) -> firsts
 *   bufs    a tuple of buffers (the recorded pages)
 *   buf     int64, n: the buffer of each row's value; start, length: int64, n: where it lies in it
 *   groups  int64, n: written, the group of each row, groups numbered as they first occur
 *   firsts  int64 array (bytes): the first row of each group
 * A value is its bytes without the NULs that end it (so "ab" and "ab\0" are one value). A value outside its
 * buffer, or arrays of other sizes, is a ValueError (nothing is written).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *data;
    Py_ssize_t len;
} Value;

static uint64_t hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The rows' values (their ending NULs left off); 0 when one lies outside its buffer */
static int values(Py_buffer *held, Py_ssize_t nbufs, const int64_t *buf, const int64_t *start, const int64_t *length,
                  Py_ssize_t n, Value *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = buf[i], s = start[i], l = length[i];
        if (b < 0 || b >= nbufs || s < 0 || l < 0 || s + l > held[b].len)
            return 0;
        const uint8_t *p = (const uint8_t *)held[b].buf + s;
        while (l > 0 && p[l - 1] == 0)
            l--;
        out[i].data = p;
        out[i].len = (Py_ssize_t)l;
    }
    return 1;
}

/* groups[i] for each row, the first row of each group in firsts; returns the groups' count */
static Py_ssize_t group(const Value *v, Py_ssize_t n, int64_t *groups, int64_t *firsts, int64_t *slots,
                        Py_ssize_t mask)
{
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at = (Py_ssize_t)(hash(v[i].data, v[i].len) & (uint64_t)mask);
        for (;; at = (at + 1) & mask) {
            int64_t g = slots[at];
            if (g < 0) {
                slots[at] = count;
                firsts[count] = i;
                groups[i] = count++;
                break;
            }
            const Value *f = &v[firsts[g]];
            if (f->len == v[i].len && memcmp(f->data, v[i].data, (size_t)f->len) == 0) {
                groups[i] = g;
                break;
            }
        }
    }
    return count;
}

static PyObject *py_distinct(PyObject *self, PyObject *args)
{
    PyObject *bufs, *result = NULL;
    Py_buffer buf, start, length, groups;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &PyTuple_Type, &bufs, &buf, &start, &length, &groups))
        return NULL;
    Py_ssize_t n = buf.len / 8, nbufs = PyTuple_GET_SIZE(bufs), got = 0, mask = 1;
    while (mask < 2 * n)
        mask <<= 1;
    Py_buffer *held = PyMem_Calloc((size_t)nbufs + 1, sizeof(Py_buffer));
    Value *v = PyMem_Calloc((size_t)n + 1, sizeof(Value));
    int64_t *firsts = PyMem_Calloc((size_t)n + 1, sizeof(int64_t)), *slots = PyMem_Malloc((size_t)mask * 8);
    int ok = held != NULL && v != NULL && firsts != NULL && slots != NULL;
    if (!ok)
        PyErr_NoMemory();
    if (ok && (buf.len % 8 || start.len != buf.len || length.len != buf.len || groups.len != buf.len)) {
        PyErr_SetString(PyExc_ValueError, "the rows' arrays are not of one size");
        ok = 0;
    }
    Py_ssize_t nheld = 0;
    for (; ok && nheld < nbufs; nheld++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(bufs, nheld), &held[nheld], PyBUF_SIMPLE) < 0)
            ok = 0;
    if (ok) {
        int inside;
        Py_BEGIN_ALLOW_THREADS /* the analysis of the next block runs meanwhile (npu_trace.export.overlap) */
        inside = values(held, nbufs, buf.buf, start.buf, length.buf, n, v);
        if (inside) {
            memset(slots, 0xff, (size_t)mask * 8);
            got = group(v, n, groups.buf, firsts, slots, mask - 1);
        }
        Py_END_ALLOW_THREADS
        if (!inside) {
            PyErr_SetString(PyExc_ValueError, "a value lies outside its buffer");
            ok = 0;
        }
    }
    if (ok)
        result = PyBytes_FromStringAndSize((const char *)firsts, got * 8);
    for (Py_ssize_t k = 0; k < nheld; k++)
        if (held[k].obj != NULL)
            PyBuffer_Release(&held[k]);
    PyMem_Free(held);
    PyMem_Free(v);
    PyMem_Free(firsts);
    PyMem_Free(slots);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&start);
    PyBuffer_Release(&length);
    PyBuffer_Release(&groups);
    return result;
}

static PyMethodDef methods[] = {
    {"distinct", py_distinct, METH_VARARGS, "The distinct byte strings of many rows (see npu_trace.export.texts)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_texts", "The distinct byte strings of many rows, compiled (npu_trace.export.texts).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__texts(void)
{
    return PyModule_Create(&module);
}
