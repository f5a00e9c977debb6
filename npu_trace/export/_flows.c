/* The flow ids of many rows, compiled (npu_trace.export.tracks.flow_ids): one part of each row's key folded into
 * its hash in one pass over the rows, where numpy makes an array per operation of the mix (2 M events exported
 * to Chrome JSON: flow_ids took 25.6-27.1 ms of the drawing's process folding in numpy, 10.1-10.6 ms with this).
 *
 * tracks.py holds the rules (_fold, flow_id) and the numpy twin, whose results are identical.
 *
 * fold(h, values, present) -> None
 *   h        uint64, n: each row's hash, folded in place with its part: h = mix(mix(h, kind), value)
 *   values   int64, n: the part's value in each row (its 64 bits), or None: a part that is None in every row
 *   present  bool, n: where the value is present (elsewhere the part is None: kind NONE, value 0), or None:
 *            present in every row
 * Arrays of other sizes are a ValueError (nothing is folded).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { KIND_INT = 1, KIND_NONE = 2 }; /* tracks.py's _INT and _NONE */

static inline uint64_t mix(uint64_t h, uint64_t value)
{
    uint64_t z = (h ^ value) + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static PyObject *py_fold(PyObject *self, PyObject *args)
{
    Py_buffer h = {0}, values = {0}, present = {0};
    PyObject *values_obj, *present_obj, *result = NULL;
    if (!PyArg_ParseTuple(args, "w*OO", &h, &values_obj, &present_obj))
        return NULL;
    Py_ssize_t n = h.len / 8;
    if (values_obj != Py_None && PyObject_GetBuffer(values_obj, &values, PyBUF_C_CONTIGUOUS) < 0)
        goto out;
    if (present_obj != Py_None && PyObject_GetBuffer(present_obj, &present, PyBUF_C_CONTIGUOUS) < 0)
        goto out;
    if (h.len % 8 || (values.obj && values.len != h.len) || (present.obj && present.len != n)) {
        PyErr_SetString(PyExc_ValueError, "h and values must be 8-byte columns of one length, present one byte a row");
        goto out;
    }
    uint64_t *hash = (uint64_t *)h.buf;
    const uint64_t *value = (const uint64_t *)values.buf;
    const uint8_t *has = (const uint8_t *)present.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int here = value != NULL && (has == NULL || has[i]);
        hash[i] = mix(mix(hash[i], here ? KIND_INT : KIND_NONE), here ? value[i] : 0);
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
out:
    PyBuffer_Release(&h);
    if (values.obj)
        PyBuffer_Release(&values);
    if (present.obj)
        PyBuffer_Release(&present);
    return result;
}

static PyMethodDef methods[] = {
    {"fold", py_fold, METH_VARARGS, "One part of each row's flow key folded into its hash (npu_trace.export.tracks)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_flows", "The compiled flow ids (npu_trace.export.tracks).", -1, methods, NULL, NULL,
    NULL, NULL,
};

PyMODINIT_FUNC PyInit__flows(void)
{
    return PyModule_Create(&module);
}
