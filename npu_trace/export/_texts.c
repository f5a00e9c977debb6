/* The distinct byte strings of many rows, compiled (npu_trace.export.texts): every row's value checked to lie in
 * its buffer, then each found in a hash table of the values seen (a row whose value is the row before's takes
 * its group without a search), the GIL released while it runs. The table is
 * sized to the values found, grown as they come (a block's interrupt names: a few dozen among tens of thousands
 * of rows; a table sized to the rows cost more to clear and fault in than the search).
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

/* A value's hash, eight bytes a step (a byte a step took as long as the rest of a row's search, for the
 * dozen-byte names of interrupt handlers). Only where a value sits in the table depends on it. */
static uint64_t hash(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    w = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        w |= (uint64_t)p[k] << (8 * k);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

/* Row i's value (its ending NULs left off) */
static Value value_of(const Py_buffer *held, const int64_t *buf, const int64_t *start, const int64_t *length,
                      Py_ssize_t i)
{
    const uint8_t *p = (const uint8_t *)held[buf[i]].buf + start[i];
    Py_ssize_t l = (Py_ssize_t)length[i];
    while (l > 0 && p[l - 1] == 0)
        l--;
    Value v = {p, l};
    return v;
}

/* 1 when every row's value lies inside its buffer */
static int inside(const Py_buffer *held, Py_ssize_t nbufs, const int64_t *buf, const int64_t *start,
                  const int64_t *length, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t b = buf[i], s = start[i], l = length[i];
        if (b < 0 || b >= nbufs || s < 0 || l < 0 || s > held[b].len || l > held[b].len - s) /* no sum: no wrap */
            return 0;
    }
    return 1;
}

/* The groups found so far: each group's first value and row, and a table of open addressing over them (its
 * size a power of two, at least twice the groups': grown as they come, a block holds few distinct values).
 * Grown with the raw allocator: the GIL is released meanwhile. */
typedef struct {
    Value *values;
    int64_t *firsts, *slots;
    Py_ssize_t count, cap, mask;
} Groups;

static int grow_table(Groups *g, Py_ssize_t mask)
{
    int64_t *slots = PyMem_RawMalloc((size_t)(mask + 1) * 8);
    if (slots == NULL)
        return 0;
    memset(slots, 0xff, (size_t)(mask + 1) * 8);
    for (Py_ssize_t k = 0; k < g->count; k++) {
        Py_ssize_t at = (Py_ssize_t)(hash(g->values[k].data, g->values[k].len) & (uint64_t)mask);
        while (slots[at] >= 0)
            at = (at + 1) & mask;
        slots[at] = k;
    }
    PyMem_RawFree(g->slots);
    g->slots = slots;
    g->mask = mask;
    return 1;
}

static int add_group(Groups *g, Value v, Py_ssize_t row)
{
    if (g->count == g->cap) {
        Py_ssize_t cap = g->cap ? 2 * g->cap : 64;
        Value *values = PyMem_RawRealloc(g->values, (size_t)cap * sizeof(Value));
        if (values == NULL)
            return 0;
        g->values = values;
        int64_t *firsts = PyMem_RawRealloc(g->firsts, (size_t)cap * 8);
        if (firsts == NULL)
            return 0;
        g->firsts = firsts;
        g->cap = cap;
    }
    g->values[g->count] = v;
    g->firsts[g->count] = row;
    g->count++;
    return 1;
}

/* groups[i] for each row, the groups (their first rows: g->firsts) as they first occur; 0: no memory */
static int group(const Py_buffer *held, const int64_t *buf, const int64_t *start, const int64_t *length,
                 Py_ssize_t n, int64_t *groups, Groups *g)
{
    if (!grow_table(g, 127))
        return 0;
    Value last = {NULL, -1};
    for (Py_ssize_t i = 0; i < n; i++) {
        Value v = value_of(held, buf, start, length, i);
        if (v.len == last.len && memcmp(v.data, last.data, (size_t)v.len) == 0) { /* the row before's value */
            groups[i] = groups[i - 1];
            continue;
        }
        last = v;
        Py_ssize_t at = (Py_ssize_t)(hash(v.data, v.len) & (uint64_t)g->mask);
        for (;; at = (at + 1) & g->mask) {
            int64_t k = g->slots[at];
            if (k < 0) {
                if (!add_group(g, v, i))
                    return 0;
                g->slots[at] = g->count - 1;
                groups[i] = g->count - 1;
                if (2 * g->count > g->mask && !grow_table(g, 2 * g->mask + 1))
                    return 0;
                break;
            }
            const Value *f = &g->values[k];
            if (f->len == v.len && memcmp(f->data, v.data, (size_t)v.len) == 0) {
                groups[i] = k;
                break;
            }
        }
    }
    return 1;
}

static PyObject *py_distinct(PyObject *self, PyObject *args)
{
    PyObject *bufs, *result = NULL;
    Py_buffer buf, start, length, groups;
    if (!PyArg_ParseTuple(args, "O!y*y*y*w*", &PyTuple_Type, &bufs, &buf, &start, &length, &groups))
        return NULL;
    Py_ssize_t n = buf.len / 8, nbufs = PyTuple_GET_SIZE(bufs);
    Py_buffer *held = PyMem_Calloc((size_t)nbufs + 1, sizeof(Py_buffer));
    Groups g = {NULL, NULL, NULL, 0, 0, 0};
    int ok = held != NULL;
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
        int within, made = 1;
        Py_BEGIN_ALLOW_THREADS
        within = inside(held, nbufs, buf.buf, start.buf, length.buf, n);
        if (within)
            made = group(held, buf.buf, start.buf, length.buf, n, groups.buf, &g);
        Py_END_ALLOW_THREADS
        if (!within) {
            PyErr_SetString(PyExc_ValueError, "a value lies outside its buffer");
            ok = 0;
        } else if (!made) {
            PyErr_NoMemory();
            ok = 0;
        }
    }
    if (ok)
        result = PyBytes_FromStringAndSize((const char *)g.firsts, g.count * 8);
    for (Py_ssize_t k = 0; k < nheld; k++)
        if (held[k].obj != NULL)
            PyBuffer_Release(&held[k]);
    PyMem_Free(held);
    PyMem_RawFree(g.values);
    PyMem_RawFree(g.firsts);
    PyMem_RawFree(g.slots);
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
