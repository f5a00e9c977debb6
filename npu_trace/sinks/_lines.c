/* Text lines from columns, compiled: what npu_trace.sinks.text's line templates make, without an object per
 * line. text.py holds the templates (which parts a line has, how each value is shown) and the pure-Python twin
 * (one %-formatting per row), whose output is identical; this file only assembles the parts.
 *
 * render(parts, n) -> (bytes, offsets)
 *   parts   a tuple, each part one of:
 *             bytes                a literal, the same on every line
 *             (code, column)       a value per row: code b"d" (int64, %d), b"u" (uint64, %d), b"x" (int64,
 *                                  %#x: "0x1f", "-0x5"), b"X" (uint64, %#x), b"9" (int64 >= 0, %09d), b"6"
 *                                  (int64, %6d), b"t" (int64 nanoseconds as seconds: %6d.%09d of their
 *                                  floor division by 10**9); the column a C-contiguous array of n of that
 *                                  type, native order; or code b"s" and a list of n str (written as UTF-8);
 *                                  or code b"k" and (an int64 array of n indexes, a list of str): row i
 *                                  writes list[index[i]] (text made once per distinct value)
 *   n       the number of lines
 *   -> every line followed by "\n", one after the other, and int64 offsets (n + 1) of where each begins
 * render_into(out, parts, n) -> int
 *   the same lines written at the start of the bytearray `out` (grown when they do not fit: a buffer used
 *   again, not a new one per call), no offsets: how many bytes they took
 * interleave(chunks, offsets, which, index) -> bytes
 *   the lines of several renders put in one order: line i of the result is line index[i] of render
 *   which[i] (int32 and int64 arrays of one length; chunks a tuple of bytes, offsets a tuple of their offsets)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../decimal.h"

typedef struct {
    int code;               /* 0: a literal */
    const char *lit;        /* the literal, or NULL */
    Py_ssize_t lit_len;
    Py_buffer col;          /* a numeric column, or the indexes of a keyed one */
    int held;               /* col is held */
    PyObject *list;         /* a str column, or the distinct str of a keyed one */
} Part;

static int hexits(uint64_t v)
{
    return (64 - __builtin_clzll(v | 1) + 3) / 4;
}

static uint64_t magnitude(int64_t v)
{
    return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

/* Nanoseconds as whole seconds and the nanoseconds past them (Python's divmod by 10**9: floor division). */
static void seconds(int64_t v, int64_t *secs, int64_t *nsecs)
{
    int64_t q = v / 1000000000, r = v % 1000000000;
    if (r < 0) {
        q -= 1;
        r += 1000000000;
    }
    *secs = q;
    *nsecs = r;
}

static int padded_width(int64_t v, int want)
{
    int w = (v < 0) + decimal_digits(magnitude(v));
    return w < want ? want : w;
}

/* The width of row i's value of a numeric part. */
static Py_ssize_t width(const Part *p, Py_ssize_t i)
{
    const int64_t *s = (const int64_t *)p->col.buf;
    const uint64_t *u = (const uint64_t *)p->col.buf;
    switch (p->code) {
    case 'd': return (s[i] < 0) + decimal_digits(magnitude(s[i]));
    case 'u': return decimal_digits(u[i]);
    case 'x': return (s[i] < 0) + 2 + hexits(magnitude(s[i]));
    case 'X': return 2 + hexits(u[i]);
    case '9': return padded_width(s[i], 9);
    case 't': { int64_t secs, nsecs; seconds(s[i], &secs, &nsecs); return padded_width(secs, 6) + 1 + 9; }
    default: return padded_width(s[i], 6); /* '6' */
    }
}

/* The n decimal digits of v (n = decimal_digits(v), npu_trace/decimal.h) */
static char *put_u(char *out, uint64_t v, int n)
{
    decimal_write(out, v, n);
    return out + n;
}

static char *put_x(char *out, uint64_t v)
{
    int n = hexits(v);
    *out++ = '0';
    *out++ = 'x';
    for (int k = n - 1; k >= 0; k--) {
        out[k] = "0123456789abcdef"[v & 15];
        v >>= 4;
    }
    return out + n;
}

/* Writes v < 10**9 as its nine digits (%09d): four pairs and the last digit, no measuring. */
static char *put_nine(char *out, uint32_t v)
{
    uint32_t high = v / 100000, low = v % 100000; /* 4 digits, then 5 */
    memcpy(out, DECIMAL_PAIRS + 2 * (high / 100), 2);
    memcpy(out + 2, DECIMAL_PAIRS + 2 * (high % 100), 2);
    memcpy(out + 4, DECIMAL_PAIRS + 2 * (low / 1000), 2);
    memcpy(out + 6, DECIMAL_PAIRS + 2 * (low / 10 % 100), 2);
    out[8] = (char)('0' + low % 10);
    return out + 9;
}

/* Writes a signed value as %d, %09d (code '9') or %6d (code '6'). */
static char *put_d(char *out, int64_t v, int code)
{
    uint64_t m = magnitude(v);
    int n = decimal_digits(m), pad = 0;
    if (code == '9' || code == '6') {
        int want = code == '9' ? 9 : 6, w = (v < 0) + n;
        pad = w < want ? want - w : 0;
        if (code == '6') {
            memset(out, ' ', (size_t)pad);
            out += pad;
            pad = 0;
        }
    }
    if (v < 0)
        *out++ = '-';
    memset(out, '0', (size_t)pad); /* %09d: zeros after the sign */
    return put_u(out + pad, m, n);
}

/* Writes row i's value of a numeric part (Python's %d, %#x, %09d, %6d; %6d.%09d of seconds). */
static char *put(const Part *p, Py_ssize_t i, char *out)
{
    const int64_t *s = (const int64_t *)p->col.buf;
    const uint64_t *u = (const uint64_t *)p->col.buf;
    if (p->code == 'u')
        return put_u(out, u[i], decimal_digits(u[i]));
    if (p->code == 'X')
        return put_x(out, u[i]);
    if (p->code == 'x') {
        if (s[i] < 0)
            *out++ = '-';
        return put_x(out, magnitude(s[i]));
    }
    if (p->code == 't') {
        int64_t secs, nsecs;
        seconds(s[i], &secs, &nsecs);
        out = put_d(out, secs, '6');
        *out++ = '.';
        return put_nine(out, (uint32_t)nsecs);
    }
    return put_d(out, s[i], p->code);
}

static void release(Part *parts, Py_ssize_t count)
{
    for (Py_ssize_t k = 0; k < count; k++) {
        if (parts[k].held)
            PyBuffer_Release(&parts[k].col);
    }
    PyMem_Free(parts);
}

/* Reads one part; 0 or -1 with an exception set. */
static int read_part(PyObject *item, Part *p, Py_ssize_t n)
{
    if (PyBytes_Check(item)) {
        p->lit = PyBytes_AS_STRING(item);
        p->lit_len = PyBytes_GET_SIZE(item);
        return 0;
    }
    const char *code;
    Py_ssize_t code_len;
    PyObject *column;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(item, 0))) {
        PyErr_SetString(PyExc_TypeError, "render: a part is bytes or (code, column)");
        return -1;
    }
    PyBytes_AsStringAndSize(PyTuple_GET_ITEM(item, 0), (char **)&code, &code_len);
    column = PyTuple_GET_ITEM(item, 1);
    if (code_len != 1 || code[0] == 0 || !strchr("duxX96tsk", code[0])) { /* strchr finds the NUL too */
        PyErr_SetString(PyExc_ValueError, "render: unknown code");
        return -1;
    }
    p->code = code[0];
    if (p->code == 's') {
        if (!PyList_Check(column) || PyList_GET_SIZE(column) != n) {
            PyErr_SetString(PyExc_ValueError, "render: a str column is a list of n str");
            return -1;
        }
        p->list = column;
        return 0;
    }
    if (p->code == 'k') {
        if (!PyTuple_Check(column) || PyTuple_GET_SIZE(column) != 2 || !PyList_Check(PyTuple_GET_ITEM(column, 1))) {
            PyErr_SetString(PyExc_ValueError, "render: a keyed column is (indexes, list of str)");
            return -1;
        }
        p->list = PyTuple_GET_ITEM(column, 1);
        column = PyTuple_GET_ITEM(column, 0);
    }
    if (PyObject_GetBuffer(column, &p->col, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    p->held = 1;
    if (p->col.len != n * 8) {
        PyErr_SetString(PyExc_ValueError, "render: a numeric or index column holds n 8-byte values");
        return -1;
    }
    if (p->code == 'k') { /* every index names one of the list's str */
        const int64_t *at = (const int64_t *)p->col.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (at[i] < 0 || at[i] >= PyList_GET_SIZE(p->list)) {
                PyErr_SetString(PyExc_ValueError, "render: an index outside its list");
                return -1;
            }
        }
    }
    return 0;
}

/* The UTF-8 of row i of a str part (NULL with an exception when it is not a str). */
static const char *str_at(const Part *p, Py_ssize_t i, Py_ssize_t *len)
{
    PyObject *s = PyList_GET_ITEM(p->list, p->code == 'k' ? ((const int64_t *)p->col.buf)[i] : i);
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "render: a str column holds str");
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(s, len);
}

static char *part_put(const Part *p, Py_ssize_t i, char *out)
{
    if (p->code == 0) {
        memcpy(out, p->lit, (size_t)p->lit_len);
        return out + p->lit_len;
    }
    if (p->code == 's' || p->code == 'k') {
        Py_ssize_t len;
        const char *s = str_at(p, i, &len); /* a str: measure or line_bound read every one */
        memcpy(out, s, (size_t)len);
        return out + len;
    }
    return put(p, i, out);
}

/* The lines' total length and each line's start (n + 1: the end last); -1 with an exception set (a str
 * column holding something else). */
static Py_ssize_t measure(const Part *parts, Py_ssize_t count, Py_ssize_t n, int64_t *starts)
{
    Py_ssize_t total = 0, len;
    for (Py_ssize_t i = 0; i < n; i++) {
        starts[i] = total;
        for (Py_ssize_t k = 0; k < count; k++) {
            const Part *p = &parts[k];
            if (p->code == 0)
                total += p->lit_len;
            else if (p->code == 's' || p->code == 'k') {
                if (str_at(p, i, &len) == NULL)
                    return -1;
                total += len;
            } else
                total += width(p, i);
        }
        total += 1; /* the newline */
    }
    starts[n] = total;
    return total;
}

/* The most bytes a part writes on any row (its widest value, its longest str); -1 with an exception set. */
static Py_ssize_t part_bound(const Part *p, Py_ssize_t n)
{
    switch (p->code) {
    case 0: return p->lit_len;
    case 's':
    case 'k': {
        Py_ssize_t most = 0, len, count = p->code == 's' ? n : PyList_GET_SIZE(p->list);
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *item = PyList_GET_ITEM(p->list, i);
            if (!PyUnicode_Check(item)) {
                PyErr_SetString(PyExc_TypeError, "render: a str column holds str");
                return -1;
            }
            if (PyUnicode_AsUTF8AndSize(item, &len) == NULL)
                return -1;
            most = len > most ? len : most;
        }
        return most;
    }
    case 't': return 20 + 1 + 9; /* a sign and 19 digits of seconds, the dot, nine digits */
    default: return 22;          /* a sign, "0x" and 16 hex digits, or a sign and 20 digits */
    }
}

/* Where lines are written: the caller's bytearray, grown as they come. */
typedef struct {
    PyObject *buffer;
    char *at;        /* its first byte */
    Py_ssize_t size; /* its size */
} Out;

/* Room for `need` bytes from `used` on (the buffer grown by half again when short); -1 with an exception set. */
static int reserve(Out *out, Py_ssize_t used, Py_ssize_t need)
{
    if (out->size - used >= need)
        return 0;
    Py_ssize_t size = used + need;
    size += size / 2;
    if (PyByteArray_Resize(out->buffer, size) < 0)
        return -1;
    out->at = PyByteArray_AS_STRING(out->buffer);
    out->size = size;
    return 0;
}

/* The most bytes a line can take (its parts' bounds and the newline); -1 with an exception set. */
static Py_ssize_t line_bound(const Part *parts, Py_ssize_t count, Py_ssize_t n)
{
    Py_ssize_t line = 1;
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t most = part_bound(&parts[k], n);
        if (most < 0)
            return -1;
        line += most;
    }
    return line;
}

/* Writes line i at `w`: the end of it. */
static char *put_line(const Part *parts, Py_ssize_t count, Py_ssize_t i, char *w)
{
    for (Py_ssize_t k = 0; k < count; k++)
        w = part_put(&parts[k], i, w);
    *w++ = '\n';
    return w;
}

/* Writes the n lines into the bytearray in one pass: their length, or -1 with an exception set. Room for a line
 * (`line`: the most it can take) is made before it is written, so no value is measured apart from its writing. */
static Py_ssize_t write_grown(const Part *parts, Py_ssize_t count, Py_ssize_t n, Py_ssize_t line, Out *out)
{
    Py_ssize_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (reserve(out, used, line) < 0)
            return -1;
        used = put_line(parts, count, i, out->at + used) - out->at;
    }
    return used;
}

/* The parts of a call of n lines, read; NULL with an exception set (release them with `release`). */
static Part *read_parts(PyObject *tuple, Py_ssize_t n)
{
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "render: a negative number of lines");
        return NULL;
    }
    Part *parts = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Part));
    if (parts == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        if (read_part(PyTuple_GET_ITEM(tuple, k), &parts[k], n) < 0) {
            release(parts, count);
            return NULL;
        }
    }
    return parts;
}

/* render(parts, n): a new bytes as long as the lines, measured first (a buffer made larger and cut to them would
 * be mapped afresh at every call: glibc keeps a freed block of that size only once one as large was freed). */
static PyObject *py_render(PyObject *self, PyObject *args)
{
    PyObject *tuple, *offsets = NULL, *out = NULL;
    Py_ssize_t n, total;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!n:render", &PyTuple_Type, &tuple, &n))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    Part *parts = read_parts(tuple, n);
    if (parts == NULL)
        return NULL;
    if ((offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 8)) != NULL) {
        total = measure(parts, count, n, (int64_t *)PyBytes_AS_STRING(offsets));
        if (total >= 0 && (out = PyBytes_FromStringAndSize(NULL, total)) != NULL) {
            char *w = PyBytes_AS_STRING(out);
            for (Py_ssize_t i = 0; i < n; i++)
                w = put_line(parts, count, i, w);
        }
    }
    release(parts, count);
    if (out == NULL) {
        Py_XDECREF(offsets);
        return NULL;
    }
    return Py_BuildValue("(NN)", out, offsets);
}

/* render_into(out, parts, n) -> int */
static PyObject *py_render_into(PyObject *self, PyObject *args)
{
    PyObject *buffer, *tuple;
    Py_ssize_t n;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!n:render_into", &PyByteArray_Type, &buffer, &PyTuple_Type, &tuple, &n))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(tuple);
    Part *parts = read_parts(tuple, n);
    if (parts == NULL)
        return NULL;
    Out out = {buffer, PyByteArray_AS_STRING(buffer), PyByteArray_GET_SIZE(buffer)};
    Py_ssize_t line = line_bound(parts, count, n);
    Py_ssize_t total = line < 0 ? -1 : write_grown(parts, count, n, line, &out);
    release(parts, count);
    return total < 0 ? NULL : PyLong_FromSsize_t(total);
}

/* interleave(chunks, offsets, which, index) -> bytes */
static PyObject *py_interleave(PyObject *self, PyObject *args)
{
    PyObject *chunks, *offsets, *out = NULL;
    Py_buffer which, index;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!y*y*:interleave", &PyTuple_Type, &chunks, &PyTuple_Type, &offsets, &which,
                          &index))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(chunks), n = index.len / 8, total = 0;
    const int32_t *w = (const int32_t *)which.buf;
    const int64_t *at = (const int64_t *)index.buf;
    if (PyTuple_GET_SIZE(offsets) != count || which.len != n * 4 || index.len % 8) {
        PyErr_SetString(PyExc_ValueError, "interleave: chunks and offsets alike, int32 which and int64 index alike");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* every line named is inside its chunk */
        if (w[i] < 0 || w[i] >= count || at[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "interleave: a line that is not there");
            goto done;
        }
        PyObject *off = PyTuple_GET_ITEM(offsets, w[i]), *chunk = PyTuple_GET_ITEM(chunks, w[i]);
        if (!PyBytes_Check(off) || !PyBytes_Check(chunk) || at[i] > PyBytes_GET_SIZE(off) / 8 - 2) {
            PyErr_SetString(PyExc_ValueError, "interleave: a line that is not there");
            goto done;
        }
        const int64_t *o = (const int64_t *)PyBytes_AS_STRING(off);
        if (o[at[i]] < 0 || o[at[i]] > o[at[i] + 1] || o[at[i] + 1] > PyBytes_GET_SIZE(chunk)) {
            PyErr_SetString(PyExc_ValueError, "interleave: offsets outside their chunk");
            goto done;
        }
        total += o[at[i] + 1] - o[at[i]];
    }
    if ((out = PyBytes_FromStringAndSize(NULL, total)) == NULL)
        goto done;
    char *dst = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *o = (const int64_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(offsets, w[i]));
        Py_ssize_t len = (Py_ssize_t)(o[at[i] + 1] - o[at[i]]);
        memcpy(dst, PyBytes_AS_STRING(PyTuple_GET_ITEM(chunks, w[i])) + o[at[i]], (size_t)len);
        dst += len;
    }
done:
    PyBuffer_Release(&which);
    PyBuffer_Release(&index);
    return out;
}

static PyMethodDef methods[] = {
    {"render", py_render, METH_VARARGS, "Lines from literal parts and columns (see npu_trace.sinks.text)."},
    {"render_into", py_render_into, METH_VARARGS, "Lines from parts written into a bytearray (grown to fit)."},
    {"interleave", py_interleave, METH_VARARGS, "The lines of several renders in one order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lines", "Text lines from columns, compiled (npu_trace.sinks.text).", -1, methods, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lines(void)
{
    return PyModule_Create(&module);
}
